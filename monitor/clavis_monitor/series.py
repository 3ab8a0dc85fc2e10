"""The agent's /metrics series, built from what its samplers and reporter stored last.

Rendering reads stored values only (and the process's own rusage): a scrape never runs
a command or reads a counter. docs/monitor.md lists every series.
"""

from __future__ import annotations

import resource
from typing import TYPE_CHECKING

from clavis_contracts.report import MonitorReport
from clavis_monitor.metrics import Metric

if TYPE_CHECKING:
    from clavis_monitor.agent import Agent


def of(agent: Agent) -> list[Metric]:
    r: MonitorReport | None = getattr(agent, "last_report", None)
    out: list[Metric] = []
    if r is not None:
        out += [
            Metric(
                "clavis_monitor_container_intensity_mpki",
                "Off-chip requests per 1000 instructions (absent when unsupported).",
                "gauge",
                tuple(
                    ({"container": c.name, "source": c.intensity_source}, c.intensity_mpki)
                    for c in r.containers
                    if c.intensity_mpki is not None
                ),
            ),
            Metric(
                "clavis_monitor_container_intensity_unsupported",
                "1 per container whose intensity is unsupported, with the reason.",
                "gauge",
                tuple(
                    ({"container": name, "reason": why}, 1.0)
                    for name, why in sorted(agent.unsupported.items())
                ),
            ),
            Metric(
                "clavis_monitor_container_busy_cores",
                "Mean busy cores.",
                "gauge",
                tuple(({"container": c.name}, c.busy_cores) for c in r.containers),
            ),
            Metric(
                "clavis_monitor_host_watts",
                "Host power (absent when unknown).",
                "gauge",
                (({"source": r.power.source}, r.power.watts),) if r.power.watts is not None else (),
            ),
            Metric(
                "clavis_monitor_host_busy_cores",
                "Mean busy cores of the host.",
                "gauge",
                (({}, r.busy_cores),),
            ),
        ]
        links = {(k, d): 0.0 for k in ("same-host", "same-rack", "cross-rack")
                 for d in ("sent", "received")}  # fmt: skip
        for s in agent.state.of("traffic").values():
            for p in s.value:
                links[(p.link, "sent")] += p.sent_per_s
                links[(p.link, "received")] += p.received_per_s
        out.append(
            Metric(
                "clavis_monitor_traffic_bytes_per_second",
                "Bytes/s sent and received by this host's containers, by link class.",
                "gauge",
                tuple(({"link": k, "direction": d}, v) for (k, d), v in links.items()),
            )
        )
    hints = agent.registry.node_jobs()
    out.append(
        Metric(
            "clavis_monitor_container_class_hint",
            "Class hint of the registered job (1 per container).",
            "gauge",
            tuple(({"container": n, "class": j.class_hint}, 1.0) for n, j in hints.items()),
        )
    )
    health = [
        ({"sampler": "perf", "state": agent.perf_state}, 1.0),
        ({"sampler": "traffic", "state": agent.traffic_state}, 1.0),
    ]
    health += [({"sampler": f"power:{m}", "state": s}, 1.0) for m, s in agent.power.states.items()]
    health += [({"sampler": f"lxd:{k}", "state": s}, 1.0) for k, s in agent.lxd_states.items()]
    out.append(
        Metric("clavis_monitor_sampler_state", "Each sampler's state.", "gauge", tuple(health))
    )
    ru = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    out += [
        Metric(
            "clavis_monitor_cpu_seconds_total",
            "The agent's own CPU time (with the commands it ran).",
            "counter",
            (({}, ru.ru_utime + ru.ru_stime + kids.ru_utime + kids.ru_stime),),
        ),
        Metric(
            "clavis_monitor_containers_vanished_total",
            "Containers gone mid-sample.",
            "counter",
            (({}, float(agent.vanished)),),
        ),
        Metric(
            "clavis_monitor_registrations_total",
            "Registration requests.",
            "counter",
            (
                ({"result": "accepted"}, float(agent.registry.accepted)),
                ({"result": "refused"}, float(agent.registry.refused)),
            ),
        ),
        Metric(
            "clavis_monitor_reports_total",
            "Reports built.",
            "counter",
            (({}, float(agent.reports)),),
        ),
    ]
    if agent.sender is not None:
        st, sp = agent.sender.stats, agent.sender.spool
        out += [
            Metric(
                "clavis_monitor_spool_reports",
                "Reports waiting in the spool.",
                "gauge",
                (({}, float(len(sp))),),
            ),
            Metric(
                "clavis_monitor_spool_bytes",
                "Bytes in the spool.",
                "gauge",
                (({}, float(sp.size_bytes)),),
            ),
            Metric(
                "clavis_monitor_reports_sent_total",
                "Reports clavisd stored.",
                "counter",
                (({}, float(st.sent)),),
            ),
            Metric(
                "clavis_monitor_reports_dropped_total",
                "Reports given up.",
                "counter",
                (
                    ({"reason": "spool-full"}, float(sp.dropped)),
                    ({"reason": "refused"}, float(st.rejected)),
                ),
            ),
            Metric(
                "clavis_monitor_send_failures_total",
                "Failed tries (retried).",
                "counter",
                (({}, float(st.failures)),),
            ),
        ]
    return out
