// History: calibrations (who, when, weights), plans and their steps, class changes; one
// list, newest first, filtered by kind and by words.
import { empty, failure, h, loading, swap } from "../dom";
import type { Ctx } from "../main";
import { filterHistory, fmt, type HistoryEntry, type HistoryKind } from "../shape";

const KINDS: [HistoryKind, string][] = [
  ["calibration", "Calibrations"],
  ["plan", "Plans"],
  ["class", "Class changes"],
];

export function historyPage(ctx: Ctx, main: HTMLElement): void {
  const list = h("section", { class: "panel", "aria-labelledby": "history-h" }, loading("the history"));
  const query = h("input", { id: "history-filter", type: "search", placeholder: "user, container, state…" });
  const kinds = new Set<HistoryKind>(KINDS.map(([k]) => k));
  const boxes = KINDS.map(([k, label]) => {
    const box = h("input", { type: "checkbox", id: `kind-${k}`, checked: true });
    box.addEventListener("change", () => {
      if (box.checked) kinds.add(k);
      else kinds.delete(k);
      render();
    });
    return h("label", { for: `kind-${k}` }, box, ` ${label}`);
  });
  query.addEventListener("input", () => render());
  main.append(
    h("h1", {}, "History"),
    h("div", { class: "filters" }, h("label", { for: "history-filter" }, "Filter "), query, ...boxes),
    list,
  );
  let entries: HistoryEntry[] = [];

  function render(): void {
    const shown = filterHistory(entries, query.value, kinds);
    const title = h("h2", { id: "history-h" }, `${shown.length} of ${entries.length} entries`);
    if (entries.length === 0) {
      swap(list, title, empty("Nothing has happened yet: no calibration, plan or class change."));
      return;
    }
    if (shown.length === 0) {
      swap(list, title, empty("No entry matches the filter."));
      return;
    }
    swap(
      list,
      title,
      h(
        "table",
        { class: "history", "aria-label": "history" },
        h("thead", {}, h("tr", {}, ["when", "kind", "who", "what", "detail"].map((c) => h("th", { scope: "col" }, c)))),
        h(
          "tbody",
          {},
          shown.map((e) =>
            h(
              "tr",
              { "data-kind": e.kind },
              h("td", {}, new Date(e.ts * 1000).toLocaleString()),
              h("td", {}, e.kind),
              h("td", {}, e.who),
              h("td", {}, e.what),
              h("td", { class: "detail" }, e.detail),
            ),
          ),
        ),
      ),
    );
  }

  async function load(): Promise<void> {
    try {
      const [cal, plans, classes] = await Promise.all([
        ctx.api.get("/api/v1/history/calibrations"),
        ctx.api.get("/api/v1/plans"),
        ctx.api.get("/api/v1/history/class-changes"),
      ]);
      entries = [
        ...cal.map((c) => ({
          kind: "calibration" as const,
          ts: c.created,
          who: c.user,
          what: `weights #${c.id} (${c.method})`,
          detail: `P ${fmt(c.weights.P)} D ${fmt(c.weights.D)} C ${fmt(c.weights.C)} M ${fmt(c.weights.M)}; picks ${c.picks.join(", ")}; front ${c.front_sha256.slice(0, 12)}`,
        })),
        ...plans.map((p) => ({
          kind: "plan" as const,
          ts: p.updated,
          who: "clavisd",
          what: `plan #${p.id} ${p.state}`,
          detail:
            `F ${fmt(p.f_current)} → ${fmt(p.f_target)}; ${p.message}; ` +
            p.steps.map((s) => `${s.container} ${s.source}→${s.target} ${s.state}`).join(", "),
        })),
        ...classes.map((c) => ({
          kind: "class" as const,
          ts: c.ts,
          who: c.container,
          what: `${c.klass}`,
          detail: `${c.job ? `job ${c.job}, ` : ""}from ${c.source}`,
        })),
      ];
      render();
    } catch (err) {
      swap(list, h("h2", { id: "history-h" }, "History"), failure("read the history", err));
    }
  }
  void load();
}
