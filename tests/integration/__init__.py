"""Integration tests of the testbed (deploy/testbed): real Slurm, LXC, CRIU, ipmi_sim."""
