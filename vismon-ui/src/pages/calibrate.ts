// Calibrate: pick a stored front or start one of the live cluster, pick at least three
// schedules on the linked Pareto screens, see both methods' weights, make them current.
import { ApiError, type Ok } from "../api/client";
import { hypervolumeCurve, parallelView, paretoScreens, type Screens } from "../charts";
import { empty, failure, h, loading, swap } from "../dom";
import type { Ctx } from "../main";
import { drawPlacement } from "../drawing";
import { readEvents } from "../sse";
import {
  fmt,
  outcomeRows,
  pickProblem,
  progressShare,
  screens,
  togglePick,
  type Axis,
  type Progress,
} from "../shape";

type Front = Ok<"/api/v1/fronts/{front_id}", "get">;
type Run = Ok<"/api/v1/front-runs/{run_id}", "get">;
type Preview = Ok<"/api/v1/fronts/{front_id}/calibrate", "post">;

declare global {
  interface Window {
    /** For the console and the end-to-end test: the open front's screens and ids. */
    vismon?: { screens: Screens | null; frontId: number | null; ids: number[] };
  }
}

export function calibratePage(ctx: Ctx, main: HTMLElement): void {
  const admin = ctx.session.role === "admin";
  const fronts = h("section", { class: "panel fronts", "aria-labelledby": "fronts-h" });
  const runPanel = h("section", { class: "panel run", "aria-labelledby": "run-h" });
  const screensBox = h("section", { class: "panel screens-box", "aria-labelledby": "screens-h" });
  const side = h("section", { class: "panel side", "aria-labelledby": "picks-h" });
  main.append(
    h("h1", {}, "Calibrate the weights"),
    h("div", { class: "cal-grid" }, h("div", {}, fronts, screensBox), h("div", {}, runPanel, side)),
  );

  let front: Front | null = null;
  let frontId: number | null = null;
  let picks: number[] = [];
  let view: Screens | null = null;
  let lines: ReturnType<typeof parallelView> | null = null;
  let stream: AbortController | null = null;
  window.vismon = { screens: null, frontId: null, ids: [] };
  ctx.onLeave(() => {
    stream?.abort();
    view?.dispose();
    lines?.dispose();
  });

  // --- stored fronts ------------------------------------------------------------------
  async function loadFronts(select?: number): Promise<void> {
    swap(fronts, h("h2", { id: "fronts-h" }, "Fronts"), loading("fronts"));
    try {
      const list = await ctx.api.get("/api/v1/fronts");
      if (list.length === 0) {
        swap(
          fronts,
          h("h2", { id: "fronts-h" }, "Fronts"),
          empty(
            admin
              ? "No front yet: start one of the live cluster below, or post one from `clavis pareto`."
              : "No front yet: an admin starts one here or posts one from `clavis pareto`.",
          ),
        );
        return;
      }
      const sel = h("select", { id: "front-select", "aria-label": "stored front" });
      for (const f of [...list].reverse()) {
        const when = new Date(f.created * 1000).toLocaleString();
        sel.append(h("option", { value: f.id }, `#${f.id} · ${f.points} schedules · ${f.objectives.join("")} · ${when}`));
      }
      const chosen = select ?? list[list.length - 1]?.id;
      if (chosen !== undefined) sel.value = String(chosen);
      sel.addEventListener("change", () => void openFront(Number(sel.value)));
      swap(fronts, h("h2", { id: "fronts-h" }, "Fronts"), h("label", { for: "front-select" }, "Front "), sel);
      if (chosen !== undefined) await openFront(chosen);
    } catch (err) {
      swap(fronts, h("h2", { id: "fronts-h" }, "Fronts"), failure("list the fronts", err));
    }
  }

  async function openFront(id: number): Promise<void> {
    view?.dispose();
    lines?.dispose();
    view = null;
    lines = null;
    picks = [];
    swap(screensBox, h("h2", { id: "screens-h" }, "Trade-offs"), loading(`front #${id}`));
    try {
      front = await ctx.api.get("/api/v1/fronts/{front_id}", { front_id: id });
      frontId = id;
    } catch (err) {
      swap(screensBox, h("h2", { id: "screens-h" }, "Trade-offs"), failure(`load front #${id}`, err));
      return;
    }
    const grid = h("div", { class: "screens" });
    const hover = h("p", { class: "hover", "aria-live": "polite" }, "Hover a schedule to see it on every screen.");
    const parallel = h("div", { class: "parallel", role: "img", "aria-label": "every schedule across all objectives" });
    const drawing = h("div", { class: "drawing", id: "placement-drawing" });
    swap(
      screensBox,
      h("h2", { id: "screens-h" }, `Trade-offs of front #${id} (${front.points.length} schedules)`),
      grid,
      hover,
      h("h3", {}, "All objectives"),
      parallel,
      h("h3", {}, "Placement"),
      drawing,
    );
    const f = front;
    const byId = new Map(f.points.map((p) => [p.id, p]));
    // The hovered schedule's placement, redrawn at most once a frame, and not again for
    // the schedule already drawn.
    let pending: number | null = null;
    let frame = 0;
    const draw = (pid: number) => {
      pending = pid;
      if (frame) return;
      frame = requestAnimationFrame(() => {
        frame = 0;
        const p = pending === null ? undefined : byId.get(pending);
        if (!p || drawing.dataset.schedule === String(p.id)) return;
        drawing.dataset.schedule = String(p.id);
        swap(
          drawing,
          h("p", { class: "hint" }, `Schedule ${p.id}: dashed lines are flows across racks (slow links), thicker for more traffic.`),
          drawPlacement(f.cluster, f.workload, p.assignment, `placement of schedule ${p.id}`),
        );
      });
    };
    if (f.points[0]) draw(f.points[0].id);
    lines = parallelView(parallel, f, f.search.objectives as Axis[]);
    view = paretoScreens(
      grid,
      f,
      screens(f.search.objectives as Axis[]),
      (pid) => {
        lines?.hover(pid);
        if (pid !== null) draw(pid);
        const p = pid === null ? undefined : byId.get(pid);
        hover.textContent = p
          ? `Schedule ${p.id}: P ${p.raw.P.toFixed(1)} W · D ${p.raw.D.toFixed(2)} · C ${p.raw.C.toPrecision(3)} B/s` +
            (f.search.objectives.includes("M") ? ` · M ${p.raw.M.toFixed(2)}` : "")
          : "Hover a schedule to see it on every screen.";
      },
      (pid) => {
        picks = togglePick(picks, pid);
        renderSide(null);
      },
    );
    window.vismon = { screens: view, frontId: id, ids: f.points.map((p) => p.id) };
    renderSide(null);
  }

  // --- picks, calibration, make current ------------------------------------------------
  /** Unpicked by its button in the list: the focus goes to the next pick's button (the
   *  previous one's after the last; the schedule-id field once none is left), not to the
   *  page's top, so that the keyboard goes on where it was. */
  function unpickFromList(id: number): void {
    const at = picks.indexOf(id);
    picks = togglePick(picks, id);
    renderSide(null);
    const next = picks[Math.min(at, picks.length - 1)];
    const target = next === undefined ? side.querySelector("#pick-id") : side.querySelector(`ul.picks button[aria-label="unpick schedule ${next}"]`);
    (target as HTMLElement | null)?.focus();
  }

  function renderSide(result: HTMLElement | null): void {
    view?.setPicks(picks);
    lines?.setPicks(picks);
    const problem = pickProblem(picks);
    const list = h(
      "ul",
      { class: "picks", "aria-label": "picked schedules" },
      picks.map((p) =>
        h(
          "li",
          {},
          `schedule ${p} `,
          h("button", { type: "button", class: "link", "aria-label": `unpick schedule ${p}`, onclick: () => unpickFromList(p) }, "×"),
        ),
      ),
    );
    // Picking by id, for the keyboard (the screens take the mouse).
    const byId = h("input", { id: "pick-id", type: "number", min: 0, "aria-label": "schedule id to pick or unpick" });
    const pickForm = h("form", { class: "pick-form" }, h("label", { for: "pick-id" }, "Schedule id "), byId, h("button", { type: "submit" }, "Pick"));
    const idMessage = h("span", { class: "hint", role: "status" });
    pickForm.append(idMessage);
    pickForm.addEventListener("submit", (ev) => {
      ev.preventDefault();
      const id = Number(byId.value);
      if (!front?.points.some((p) => p.id === id)) {
        idMessage.textContent = ` no schedule ${byId.value} in this front`;
        return;
      }
      picks = togglePick(picks, id);
      renderSide(null);
      (side.querySelector("#pick-id") as HTMLInputElement | null)?.focus();
    });
    const calibrate = h("button", { type: "button", id: "calibrate", disabled: problem !== null || front === null }, "Calibrate");
    calibrate.addEventListener("click", () => void runCalibrate());
    swap(
      side,
      h("h2", { id: "picks-h" }, "Picks"),
      front === null ? empty("Open a front to pick schedules.") : picks.length ? list : empty("Click schedules you find acceptable on any screen."),
      front === null ? null : pickForm,
      h("p", { class: "hint" }, problem ?? `${picks.length} picked`),
      calibrate,
      result,
    );
  }

  async function runCalibrate(): Promise<void> {
    if (frontId === null) return;
    const box = h("div", { class: "calibration" }, loading("weights"));
    renderSide(box);
    let p: Preview;
    try {
      p = await ctx.api.post("/api/v1/fronts/{front_id}/calibrate", { picks }, { front_id: frontId });
    } catch (err) {
      swap(box, err instanceof ApiError && err.status === 422 ? h("p", { class: "state error", role: "alert" }, err.detail) : failure("calibrate", err));
      return;
    }
    const rows = outcomeRows(p.outcomes, p.recommended);
    const table = h(
      "table",
      { class: "weights", "aria-label": "weights from both methods" },
      h("thead", {}, h("tr", {}, ["method", "P", "D", "C", "M", "residual", "regret"].map((c) => h("th", { scope: "col" }, c)))),
      h(
        "tbody",
        {},
        rows.map((r) =>
          h(
            "tr",
            { class: r.recommended ? "recommended" : "" },
            h("th", { scope: "row" }, r.method + (r.recommended ? " ★" : "")),
            r.error ? h("td", { colspan: 6, class: "refused" }, `failed: ${r.error}`) : r.cells.map((c) => h("td", {}, c)),
          ),
        ),
      ),
    );
    const status = h("div", { class: "message", "aria-live": "polite" });
    const actions = admin
      ? h(
          "div",
          { class: "actions" },
          p.outcomes
            .filter((o) => o.weights)
            .map((o) =>
              h(
                "button",
                { type: "button", class: o.method === p.recommended ? "primary" : "", "data-method": o.method, onclick: () => void makeCurrent(o.method, status) },
                `Make ${o.method} weights current`,
              ),
            ),
        )
      : null;
    swap(
      box,
      h("h3", {}, "Weights from the picks"),
      table,
      h("p", { class: "reason" }, `Recommended: ${p.reason}`),
      p.refusal ? h("p", { class: "state error", role: "alert" }, `Refused as the CLI would: ${p.refusal}`) : null,
      actions,
      status,
    );
  }

  async function makeCurrent(method: "thesis" | "inverse", status: HTMLElement): Promise<void> {
    if (frontId === null) return;
    swap(status, loading("making the weights current"));
    try {
      const r = await ctx.api.post("/api/v1/fronts/{front_id}/picks", { picks, method }, { front_id: frontId });
      const w = r.weights.weights;
      swap(
        status,
        h("p", { class: "state ok", role: "status" }, `Weights #${r.weights_id} current (${method}), by ${ctx.session.user} at ${new Date().toLocaleTimeString()}: P ${fmt(w.P)} D ${fmt(w.D)} C ${fmt(w.C)} M ${fmt(w.M)}`),
      );
    } catch (err) {
      swap(status, failure("make the weights current", err));
    }
  }

  // --- a run of the live cluster --------------------------------------------------------
  function runForm(): HTMLElement {
    const num = (id: string, label: string, value: number, min: number, max: number, step = 1) =>
      h("label", { for: id }, label, h("input", { id, type: "number", value, min, max, step, required: true }));
    const form = h(
      "form",
      { class: "run-form", "aria-label": "start a front" },
      num("population", "Population ", 40, 4, 400),
      num("generations", "Generations ", 40, 1, 2000),
      num("seed", "Seed ", 0, 0, 2147483647),
      num("seed-time", "CP-SAT seeding (s) ", 0.2, 0, 10, 0.1),
      h(
        "label",
        { for: "from-front" },
        "Workload of front # ",
        h("input", { id: "from-front", type: "number", min: 1, placeholder: "live cluster", "aria-describedby": "from-front-hint" }),
      ),
      h("span", { id: "from-front-hint", class: "hint" }, "Empty: the live cluster; a front's id: its cluster and workload (e.g. a representative one)."),
      h("label", { for: "with-migration" }, h("input", { id: "with-migration", type: "checkbox" }), " M (migration) as a fourth axis"),
      h("button", { type: "submit", id: "start-run" }, "Start a front of the live cluster"),
    );
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      const val = (id: string) => Number((form.querySelector(`#${id}`) as HTMLInputElement).value);
      const from = (form.querySelector("#from-front") as HTMLInputElement).value;
      const settings = {
        algorithm: "nsga2" as const,
        with_migration: (form.querySelector("#with-migration") as HTMLInputElement).checked,
        population: val("population"),
        generations: val("generations"),
        seed: val("seed"),
        seed_time: val("seed-time"),
        from_front: from ? Number(from) : null,
      };
      ctx.api
        .post("/api/v1/front-runs", settings)
        .then((run) => watch(run))
        .catch((err: unknown) => swap(runPanel, h("h2", { id: "run-h" }, "Live front"), failure("start a front", err), runForm()));
    });
    return form;
  }

  function watch(run: Run): void {
    stream?.abort();
    stream = new AbortController();
    const total = run.settings.generations ?? 1;
    const bar = h("progress", { id: "run-progress", max: 1, value: 0, "aria-label": "front search progress" });
    const text = h("p", { id: "run-text", "aria-live": "polite" }, `Run #${run.id} by ${run.user}: seeding…`);
    const curve = h("div", { class: "hv-curve", role: "img", "aria-label": "hypervolume by generation" });
    const cancel = admin
      ? h("button", { type: "button", id: "cancel-run", onclick: () => void ctx.api.post("/api/v1/front-runs/{run_id}/cancel", undefined, { run_id: run.id }).catch((err: unknown) => swap(text, failure("cancel", err))) }, "Cancel")
      : null;
    swap(runPanel, h("h2", { id: "run-h" }, "Live front"), bar, text, curve, cancel);
    const hv = hypervolumeCurve(curve);
    ctx.onLeave(() => hv.dispose());
    readEvents(
      ctx.api,
      `/api/v1/front-runs/${run.id}/events`,
      (e) => {
        if (e.event === "progress") {
          const g = JSON.parse(e.data) as Progress;
          bar.value = progressShare(g, total);
          text.textContent = `Run #${run.id}: generation ${g.generation}/${total} · ${g.evaluations} evaluations · hypervolume ${g.hypervolume.toFixed(5)} · front ${g.front_size}`;
          hv.add(g.generation, g.hypervolume);
        } else if (e.event === "end") {
          const end = JSON.parse(e.data) as Run;
          cancel?.remove();
          text.textContent = `Run #${run.id} ${end.state}: ${end.message}`;
          text.dataset.state = end.state;
          if (admin) runPanel.append(runForm());
          if (end.state === "done" && end.front_id) void loadFronts(end.front_id);
        }
      },
      stream.signal,
    ).catch((err: unknown) => {
      if (!(err instanceof DOMException && err.name === "AbortError")) runPanel.append(failure("follow the run", err));
    });
  }

  async function loadRun(): Promise<void> {
    swap(runPanel, h("h2", { id: "run-h" }, "Live front"), loading("runs"));
    try {
      const runs = await ctx.api.get("/api/v1/front-runs");
      const running = runs.find((r) => r.state === "running");
      if (running) watch(running);
      else swap(runPanel, h("h2", { id: "run-h" }, "Live front"), admin ? runForm() : empty("No front is being computed."));
    } catch (err) {
      swap(runPanel, h("h2", { id: "run-h" }, "Live front"), failure("list the runs", err));
    }
  }

  renderSide(null);
  swap(screensBox, h("h2", { id: "screens-h" }, "Trade-offs"), empty("No front open."));
  void loadRun();
  void loadFronts();
}
