/*
 * dcmi_power.c - ipmi_sim loadlib module answering DCMI "Get Power Reading".
 *
 * ipmi_sim has no DCMI (TESTBED-NOTES, "IPMI"): `ipmitool dcmi power reading` gets
 * "Invalid command (c1)". This module registers a handler for the DCMI group extension
 * (netfn 0x2C, first data byte 0xDC) and answers two commands:
 *   0x01 Get DCMI Capabilities Info (parameter 1, so ipmitool's discovery succeeds)
 *   0x02 Get Power Reading (current/min/max/average from the watts file)
 * The watts come from a text file that the testbed's power model rewrites every
 * second; its path is the loadlib option string:
 *   loadlib "/path/dcmi_power.so" "/run/clavis-testbed/bmc/r1h1/watts"
 * The file is read at every request, so the reading follows the host's load.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <OpenIPMI/ipmi_bits.h>
#include <OpenIPMI/ipmi_err.h>
#include <OpenIPMI/ipmi_msgbits.h>
#include <OpenIPMI/mcserv.h>
#include <OpenIPMI/serv.h>

#define DCMI_GROUP 0xdc
#define DCMI_CC_OK 0x00
#define DCMI_CMD_GET_CAPABILITIES 0x01
#define DCMI_CMD_GET_POWER_READING 0x02
/* DCMI 1.5 spec, table 6-16: bit 6 of the state byte = "power measurement active" */
#define DCMI_POWER_ACTIVE 0x40
/* Watts are reported in 16 bits; a bigger number in the file is clamped */
#define DCMI_WATTS_MAX 0xffff

int ipmi_sim_module_print_version(sys_data_t *sys, char *options);
int ipmi_sim_module_init(sys_data_t *sys, char *options);

struct dcmi_state {
	char path[4096];
	/* statistics since the module was loaded, as a real BMC keeps them */
	unsigned int min_w;
	unsigned int max_w;
	double sum_w;
	unsigned long samples;
	time_t since;
};

static struct dcmi_state state;

static void put_u16(unsigned char *p, unsigned int v)
{
	p[0] = v & 0xff;
	p[1] = (v >> 8) & 0xff;
}

static void put_u32(unsigned char *p, uint32_t v)
{
	p[0] = v & 0xff;
	p[1] = (v >> 8) & 0xff;
	p[2] = (v >> 16) & 0xff;
	p[3] = (v >> 24) & 0xff;
}

/* Read the current watts; RET 0 on success, -1 when the file is missing or garbage. */
static int read_watts(unsigned int *watts)
{
	FILE *f;
	char buf[64];
	char *end;
	double v;

	f = fopen(state.path, "r");
	if (!f)
		return -1;
	if (!fgets(buf, sizeof(buf), f)) {
		fclose(f);
		return -1;
	}
	fclose(f);
	v = strtod(buf, &end);
	if (end == buf || v < 0.0 || v != v)
		return -1;
	if (v > DCMI_WATTS_MAX)
		v = DCMI_WATTS_MAX;
	*watts = (unsigned int)(v + 0.5);
	return 0;
}

static void power_reading(unsigned char *rdata, unsigned int *rdata_len)
{
	unsigned int w;
	unsigned int avg;
	time_t now = time(NULL);

	if (read_watts(&w) != 0) {
		/* 0xD5: "command not supported in present state" - no reading yet */
		rdata[0] = 0xd5;
		rdata[1] = DCMI_GROUP;
		*rdata_len = 2;
		return;
	}
	if (state.samples == 0 || w < state.min_w)
		state.min_w = w;
	if (state.samples == 0 || w > state.max_w)
		state.max_w = w;
	state.sum_w += w;
	state.samples++;
	avg = (unsigned int)(state.sum_w / (double)state.samples + 0.5);

	rdata[0] = DCMI_CC_OK;
	rdata[1] = DCMI_GROUP;
	put_u16(rdata + 2, w);
	put_u16(rdata + 4, state.min_w);
	put_u16(rdata + 6, state.max_w);
	put_u16(rdata + 8, avg);
	put_u32(rdata + 10, (uint32_t)now);
	put_u32(rdata + 14, (uint32_t)((now - state.since) * 1000));
	rdata[18] = DCMI_POWER_ACTIVE;
	*rdata_len = 19;
}

static void capabilities(msg_t *msg, unsigned char *rdata, unsigned int *rdata_len)
{
	rdata[1] = DCMI_GROUP;
	if (msg->len < 2 || msg->data[1] != 0x01) {
		/* only parameter 1 (supported capabilities) is modelled */
		rdata[0] = IPMI_INVALID_DATA_FIELD_CC;
		*rdata_len = 2;
		return;
	}
	rdata[0] = DCMI_CC_OK;
	rdata[2] = 1; /* DCMI major version */
	rdata[3] = 5; /* DCMI minor version */
	rdata[4] = 2; /* parameter revision */
	rdata[5] = 0; /* reserved */
	rdata[6] = 0x01; /* platform: power management supported */
	rdata[7] = 0x00; /* no in-band system interface capabilities */
	rdata[8] = 0x00; /* no out-of-band extras */
	*rdata_len = 9;
}

static void dcmi_handler(lmc_data_t *mc, msg_t *msg, unsigned char *rdata,
			 unsigned int *rdata_len, void *cb_data)
{
	(void)mc;
	(void)cb_data;
	switch (msg->cmd) {
	case DCMI_CMD_GET_CAPABILITIES:
		capabilities(msg, rdata, rdata_len);
		break;
	case DCMI_CMD_GET_POWER_READING:
		power_reading(rdata, rdata_len);
		break;
	default:
		rdata[0] = IPMI_INVALID_CMD_CC;
		rdata[1] = DCMI_GROUP;
		*rdata_len = 2;
	}
}

int ipmi_sim_module_print_version(sys_data_t *sys, char *options)
{
	(void)sys;
	(void)options;
	printf("clavis dcmi_power 1\n");
	return 0;
}

int ipmi_sim_module_init(sys_data_t *sys, char *options)
{
	size_t n;

	(void)sys;
	if (!options || !options[0]) {
		fprintf(stderr, "dcmi_power: loadlib needs the watts file path as option\n");
		return EINVAL;
	}
	n = strlen(options);
	if (n >= sizeof(state.path)) {
		fprintf(stderr, "dcmi_power: watts file path too long\n");
		return EINVAL;
	}
	memcpy(state.path, options, n + 1);
	state.since = time(NULL);
	ipmi_emu_register_group_extension_handler(DCMI_GROUP, dcmi_handler, NULL);
	return 0;
}
