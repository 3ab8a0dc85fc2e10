// The plan panels of the Cluster page: the pending or running plan with its steps, and for
// admins a dry-run repack (proposed moves, P/D/C/M before and after) and Apply.
import type { Client, Ok } from "../api/client";
import { empty, failure, h, loading, swap } from "../dom";
import { fmt, objectiveRows } from "../shape";

type Plan = Ok<"/api/v1/plans", "get">[number];
type Repack = Ok<"/api/v1/repack", "post">;
type Step = { wave: number; container: string; source: string; target: string; state?: string; message?: string };

function stepsTable(steps: Step[], label: string): HTMLElement {
  const withState = steps.some((s) => s.state !== undefined);
  return h(
    "table",
    { class: "steps", "aria-label": label },
    h("thead", {}, h("tr", {}, ["wave", "container", "from → to", ...(withState ? ["state", "message"] : [])].map((c) => h("th", { scope: "col" }, c)))),
    h(
      "tbody",
      {},
      steps.map((s) =>
        h(
          "tr",
          { "data-state": s.state ?? null },
          h("td", {}, String(s.wave)),
          h("th", { scope: "row" }, s.container),
          h("td", {}, `${s.source} → ${s.target}`),
          withState ? h("td", {}, s.state ?? "") : null,
          withState ? h("td", {}, s.message ?? "") : null,
        ),
      ),
    ),
  );
}

function objectivesTable(summary: Record<string, unknown>): HTMLElement | null {
  const rows = objectiveRows(summary);
  if (rows.length === 0) return null;
  return h(
    "table",
    { class: "objectives", "aria-label": "objectives before and after" },
    h("thead", {}, h("tr", {}, ["", "before", "after"].map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, rows.map((r) => h("tr", {}, h("th", { scope: "row" }, r.name), h("td", {}, r.before), h("td", {}, r.after)))),
  );
}

/** The newest plan that is pending or running, with its steps. */
export async function renderPlans(api: Client, box: HTMLElement): Promise<void> {
  const title = h("h2", { id: "plan-h" }, "Plan");
  let plans: Plan[];
  try {
    plans = await api.get("/api/v1/plans");
  } catch (err) {
    swap(box, title, failure("read the plans", err));
    return;
  }
  const live = [...plans].reverse().find((p) => p.state === "pending" || p.state === "running");
  if (!live) {
    swap(box, title, empty("No plan is pending or running."));
    return;
  }
  swap(
    box,
    title,
    h("p", { id: "plan-state", "data-state": live.state }, `Plan #${live.id} ${live.state}: F ${fmt(live.f_current)} → ${fmt(live.f_target)}. ${live.message}`),
    stepsTable(live.steps, `steps of plan ${live.id}`),
  );
}

/** Dry run and Apply, for admins. */
export function repackPanel(api: Client, box: HTMLElement, onApplied: () => void): void {
  const result = h("div", { class: "repack-result", "aria-live": "polite" });
  const run = (apply: boolean) => {
    swap(result, loading(apply ? "the applied repack" : "the dry run (the solver may take its time limit)"));
    api
      .post("/api/v1/repack", { apply })
      .then((r) => {
        swap(result, ...repackResult(r));
        if (apply) onApplied();
      })
      .catch((err: unknown) => swap(result, failure(apply ? "apply a repack" : "dry-run a repack", err)));
  };
  swap(
    box,
    h("h2", { id: "repack-h" }, "Repack"),
    h(
      "div",
      { class: "actions" },
      h("button", { type: "button", id: "dry-run", onclick: () => run(false) }, "Dry-run repack"),
      h("button", { type: "button", id: "apply-repack", onclick: () => run(true) }, "Apply"),
    ),
    result,
  );
}

function repackResult(r: Repack): (HTMLElement | null)[] {
  const head = h("p", { id: "repack-decision", "data-decision": r.decision }, `${r.decision}: ${r.message}`);
  const p = r.proposal ?? r.plan;
  if (!p) return [head];
  const f = h("p", {}, `F ${fmt(p.f_current)} → ${fmt(p.f_target)}`);
  const deferred = r.proposal?.deferred.length
    ? h("p", { class: "state error" }, `Deferred (not run): ${r.proposal.deferred.map((m) => `${m.container} ${m.source} → ${m.target}`).join(", ")}`)
    : null;
  return [head, f, objectivesTable(p.summary), p.steps.length ? stepsTable(p.steps, "proposed moves") : empty("No move."), deferred];
}
