// Cluster: hosts with their watts and containers (class by colour and shape), the weights
// in force and the advice's state; refreshed every few seconds.
import { empty, failure, h, loading, swap } from "../dom";
import type { Ctx } from "../main";
import { drawPlacement } from "../drawing";
import { liveDocs } from "../layout";
import { renderPlans, repackPanel } from "./plans";
import { ago, classColour, fmt, hostRows, type ContainerLike, type HostRow } from "../shape";

const REFRESH_MS = 5000;
const FRESH_S = 120; // clavisd's ingest.max_report_age_s default: older hosts count as silent

const GLYPH = { turtle: "●", devil: "▲", contended: "◆", unknown: "■" } as const;

function chip(c: ContainerLike, contended: boolean): HTMLElement {
  const kind = c.effective_class === "devil" && contended ? "contended" : c.effective_class;
  const label = kind === "contended" ? "contended devil" : kind;
  return h(
    "span",
    {
      class: `chip ${kind}`,
      style: `--c: ${classColour(c.effective_class, contended)}`,
      title: `${c.name}: ${label} (${c.effective_source}), ${c.cores} cores, ${c.intensity_mpki === null ? "no intensity" : `${c.intensity_mpki.toFixed(1)} MPKI`}${c.job ? `, job ${c.job}` : ""}`,
    },
    h("span", { "aria-hidden": "true" }, GLYPH[kind]),
    ` ${c.name} · ${label}`,
  );
}

function hostTable(rows: HostRow[]): HTMLElement {
  return h(
    "table",
    { class: "hosts", "aria-label": "hosts" },
    h("thead", {}, h("tr", {}, ["rack", "host", "report", "cores used", "watts", "containers"].map((c) => h("th", { scope: "col" }, c)))),
    h(
      "tbody",
      {},
      rows.map((r) =>
        h(
          "tr",
          { "data-host": r.name, class: r.contended ? "contended" : "" },
          h("td", {}, r.rack),
          h("th", { scope: "row" }, r.name),
          h("td", { class: r.reporting }, r.reporting === "never" ? "never reported" : `${r.reporting}`),
          h("td", {}, `${r.usedCores}/${r.cores}`),
          h("td", {}, r.watts === null ? "—" : `${r.watts.toFixed(0)} W`),
          h("td", {}, r.containers.length ? r.containers.map((c) => chip(c, r.contended)) : h("span", { class: "none" }, "none")),
        ),
      ),
    ),
  );
}

export function clusterPage(ctx: Ctx, main: HTMLElement): void {
  const hostsBox = h("section", { class: "panel", "aria-labelledby": "hosts-h" }, h("h2", { id: "hosts-h" }, "Hosts"), loading("hosts"));
  const weightsBox = h("section", { class: "panel", "aria-labelledby": "weights-h" }, h("h2", { id: "weights-h" }, "Weights in force"), loading("weights"));
  const adviceBox = h("section", { class: "panel", "aria-labelledby": "advice-h" }, h("h2", { id: "advice-h" }, "Advice to select/clavis"), loading("advice"));
  const legend = h(
    "p",
    { class: "legend" },
    (["turtle", "devil", "contended", "unknown"] as const).map((k) =>
      h("span", { class: `chip ${k}`, style: `--c: ${classColour(k === "contended" ? "devil" : k, k === "contended")}` }, `${GLYPH[k]} ${k === "contended" ? "contended devil" : k}`),
    ),
  );
  const drawingBox = h("section", { class: "panel drawing", id: "cluster-drawing", "aria-labelledby": "drawing-h" }, h("h2", { id: "drawing-h" }, "Placement"), loading("the placement"));
  const planBox = h("section", { class: "panel", "aria-labelledby": "plan-h" }, h("h2", { id: "plan-h" }, "Plan"), loading("plans"));
  const repackBox = h("section", { class: "panel", "aria-labelledby": "repack-h" });
  const admin = ctx.session.role === "admin";
  main.append(
    h("h1", {}, "Cluster"),
    legend,
    h("div", { class: "cluster-grid" }, h("div", {}, hostsBox, drawingBox, planBox, admin ? repackBox : null), h("div", {}, weightsBox, adviceBox)),
  );
  if (admin) repackPanel(ctx.api, repackBox, () => void renderPlans(ctx.api, planBox));

  async function refresh(): Promise<void> {
    const now = Date.now() / 1000;
    void renderPlans(ctx.api, planBox);
    const [hosts, containers, weights, advice] = await Promise.allSettled([
      ctx.api.get("/api/v1/hosts"),
      ctx.api.get("/api/v1/containers"),
      ctx.api.get("/api/v1/weights"),
      ctx.api.get("/api/v1/advice"),
    ]);
    if (hosts.status === "rejected") swap(hostsBox, h("h2", { id: "hosts-h" }, "Hosts"), failure("read the hosts", hosts.reason));
    else if (containers.status === "rejected") swap(hostsBox, h("h2", { id: "hosts-h" }, "Hosts"), failure("read the containers", containers.reason));
    else {
      const rows = hostRows(hosts.value, containers.value, now, FRESH_S);
      const anyReport = rows.some((r) => r.reporting !== "never");
      swap(
        hostsBox,
        h("h2", { id: "hosts-h" }, `Hosts (${rows.length})`),
        rows.length === 0 ? empty("The cluster file names no host.") : null,
        rows.length > 0 && !anyReport ? empty("No host has reported yet: start clavis-monitor on the hosts (a new cluster has no monitor data).") : null,
        rows.length > 0 && anyReport && containers.value.length === 0 ? empty("No container is running.") : null,
        rows.length > 0 ? hostTable(rows) : null,
      );
      if (containers.value.length > 0) {
        const docs = liveDocs(hosts.value, containers.value);
        swap(
          drawingBox,
          h("h2", { id: "drawing-h" }, "Placement"),
          h("p", { class: "hint" }, "Dashed lines: a job's traffic across racks (slow links), thicker for more."),
          drawPlacement(docs.cluster, docs.workload, docs.assignment, "the current placement"),
        );
      } else swap(drawingBox, h("h2", { id: "drawing-h" }, "Placement"), empty("No container to draw."));
    }
    if (weights.status === "rejected") swap(weightsBox, h("h2", { id: "weights-h" }, "Weights in force"), failure("read the weights", weights.reason));
    else {
      const w = weights.value;
      swap(
        weightsBox,
        h("h2", { id: "weights-h" }, "Weights in force"),
        h(
          "table",
          { class: "weights", id: "weights-in-force" },
          h("tr", {}, ["P", "D", "C", "M"].map((k) => h("th", { scope: "col" }, k))),
          h("tr", {}, [w.P, w.D, w.C, w.M].map((v) => h("td", {}, fmt(v)))),
        ),
        h("p", { class: "hint", "data-source": w.source }, w.source === "calibrated" ? "Calibrated by an admin (Calibrate page)." : "Configured defaults: no calibration yet."),
      );
    }
    if (advice.status === "rejected") swap(adviceBox, h("h2", { id: "advice-h" }, "Advice to select/clavis"), failure("read the advice", advice.reason));
    else {
      const a = advice.value;
      swap(
        adviceBox,
        h("h2", { id: "advice-h" }, "Advice to select/clavis"),
        h(
          "p",
          { class: `advice ${a.state}`, id: "advice-state" },
          a.state === "missing"
            ? "No advice file yet: clavisd writes one within seconds of starting."
            : `${a.state === "fresh" ? "Fresh" : "Stale"}: written ${ago(a.age_s)}, valid ${a.valid_s.toFixed(0)} s, ${a.nodes} nodes.`,
        ),
      );
    }
  }

  void refresh();
  const timer = window.setInterval(() => void refresh(), REFRESH_MS);
  ctx.onLeave(() => window.clearInterval(timer));
}
