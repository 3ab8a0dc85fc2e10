// Pure data shaping for the pages: what the charts and tables show, computed from the API's
// documents. Unit-tested (tests/shape.test.ts); no DOM, no network.

export type Axis = "P" | "D" | "C" | "M";
export type Klass = "devil" | "turtle" | "unknown";

export interface Values {
  P: number;
  D: number;
  C: number;
  M: number;
}

export interface FrontPointLike {
  id: number;
  assignment: Record<string, string>;
  raw: Values;
  normalised: Values;
}

export interface FrontLike {
  search: { objectives: Axis[] };
  points: FrontPointLike[];
}

/** The three pairwise trade-off screens of the thesis (§5.5.1, after Vismon); M joins as
 * a fourth axis (three more screens) when the front was searched with migration. */
export function screens(objectives: Axis[]): [Axis, Axis][] {
  const out: [Axis, Axis][] = [];
  for (let i = 0; i < objectives.length; i++) {
    for (let j = i + 1; j < objectives.length; j++) {
      out.push([objectives[i] as Axis, objectives[j] as Axis]);
    }
  }
  return out;
}

/** One scatter screen's data: [x, y, point id] per schedule, in the front's order, so the
 * same data index names the same schedule on every screen (linked hover relies on it). */
export function screenData(front: FrontLike, x: Axis, y: Axis): [number, number, number][] {
  return front.points.map((p) => [p.normalised[x], p.normalised[y], p.id]);
}

/** Data index of each schedule id (ids need not be 0..n-1 nor in order). */
export function indexById(front: FrontLike): Map<number, number> {
  return new Map(front.points.map((p, i) => [p.id, i]));
}

/** Click to pick, click again to unpick; the order of picking is kept. */
export function togglePick(picks: readonly number[], id: number): number[] {
  return picks.includes(id) ? picks.filter((p) => p !== id) : [...picks, id];
}

export const MIN_PICKS = 3;

/** Why "Calibrate" is not available yet, or null when it is. */
export function pickProblem(picks: readonly number[]): string | null {
  if (picks.length < MIN_PICKS) {
    const more = MIN_PICKS - picks.length;
    return `pick ${more} more schedule${more === 1 ? "" : "s"} (at least ${MIN_PICKS})`;
  }
  return null;
}

// Okabe & Ito's palette: told apart with every common colour-vision deficiency, and no
// red/green pair carries meaning. Shapes repeat what colour says.
export const COLOURS = {
  turtle: "#0072B2", // blue
  devil: "#E69F00", // orange
  contended: "#CC79A7", // reddish purple
  unknown: "#7F7F7F", // grey
  point: "#56B4E9", // sky blue
  picked: "#000000",
  hovered: "#D55E00", // vermillion, only with a larger symbol
} as const;

export function classColour(k: Klass, contended: boolean): string {
  if (k === "devil") return contended ? COLOURS.contended : COLOURS.devil;
  return k === "turtle" ? COLOURS.turtle : COLOURS.unknown;
}

export interface HostLike {
  name: string;
  rack: string;
  cores: number;
  last_report: number | null;
  busy_cores: number | null;
  watts: number | null;
}

export interface ContainerLike {
  name: string;
  host: string;
  job: string | null;
  cores: number;
  intensity_mpki: number | null;
  effective_class: Klass;
  effective_source: string;
}

export interface HostRow {
  name: string;
  rack: string;
  cores: number;
  usedCores: number;
  watts: number | null;
  reporting: "fresh" | "silent" | "never";
  devils: number;
  contended: boolean;
  containers: ContainerLike[];
}

/** Hosts in rack then name order with their containers; a host with more than one devil
 * is contended (docs/objectives.md: devils beyond the tolerance of one per host). */
export function hostRows(
  hosts: HostLike[],
  containers: ContainerLike[],
  now: number,
  freshS: number,
): HostRow[] {
  const byHost = new Map<string, ContainerLike[]>();
  for (const c of containers) {
    const list = byHost.get(c.host) ?? [];
    list.push(c);
    byHost.set(c.host, list);
  }
  return [...hosts]
    .sort((a, b) => a.rack.localeCompare(b.rack) || a.name.localeCompare(b.name))
    .map((h) => {
      const cs = (byHost.get(h.name) ?? []).sort((a, b) => a.name.localeCompare(b.name));
      const devils = cs.filter((c) => c.effective_class === "devil").length;
      const reporting =
        h.last_report === null ? "never" : now - h.last_report <= freshS ? "fresh" : "silent";
      return {
        name: h.name,
        rack: h.rack,
        cores: h.cores,
        usedCores: cs.reduce((s, c) => s + c.cores, 0),
        watts: h.watts,
        reporting,
        devils,
        contended: devils > 1,
        containers: cs,
      };
    });
}

export interface WeightsLike {
  P: number;
  D: number;
  C: number;
  M: number;
}

export interface OutcomeLike {
  method: "thesis" | "inverse";
  weights?: WeightsLike | null;
  residual?: number | null;
  regret?: number | null;
  error?: string | null;
}

export interface OutcomeRow {
  method: string;
  cells: string[]; // P, D, C, M then residual and regret, formatted
  error: string | null;
  recommended: boolean;
}

export function fmt(x: number | null | undefined, digits = 4): string {
  if (x === null || x === undefined || !Number.isFinite(x)) return "—";
  return x.toFixed(digits);
}

/** The calibration table, as `clavis calibrate` prints it. */
export function outcomeRows(outcomes: OutcomeLike[], recommended: string): OutcomeRow[] {
  return outcomes.map((o) => ({
    method: o.method,
    cells: o.weights
      ? [o.weights.P, o.weights.D, o.weights.C, o.weights.M, o.residual, o.regret].map((v) =>
          fmt(v),
        )
      : ["—", "—", "—", "—", "—", "—"],
    error: o.error ?? null,
    recommended: o.method === recommended,
  }));
}

export interface Progress {
  generation: number;
  evaluations: number;
  hypervolume: number;
  front_size: number;
}

/** Share of the run done, 0..1, for the progress bar. */
export function progressShare(p: Progress | null, generations: number): number {
  if (p === null || generations <= 0) return 0;
  return Math.min(1, Math.max(0, p.generation / generations));
}

export interface SseEvent {
  event: string;
  data: string;
}

/** Incremental Server-Sent Events parser (the WHATWG event-stream format, enough of it
 * for clavisd: event and data fields, comments, CRLF or LF). Feed chunks as they come; it
 * returns the complete events and keeps the rest. */
export class SseParser {
  private buffer = "";

  feed(chunk: string): SseEvent[] {
    this.buffer += chunk.replace(/\r\n?/g, "\n");
    const out: SseEvent[] = [];
    let end: number;
    while ((end = this.buffer.indexOf("\n\n")) >= 0) {
      const block = this.buffer.slice(0, end);
      this.buffer = this.buffer.slice(end + 2);
      let event = "message";
      const data: string[] = [];
      for (const line of block.split("\n")) {
        if (line === "" || line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (field === "event") event = value;
        else if (field === "data") data.push(value);
      }
      if (data.length > 0) out.push({ event, data: data.join("\n") });
    }
    return out;
  }
}

/** "3 s ago", "4 min ago": how old a report or the advice is. */
export function ago(seconds: number | null): string {
  if (seconds === null || !Number.isFinite(seconds)) return "never";
  if (seconds < 90) return `${Math.max(0, Math.round(seconds))} s ago`;
  if (seconds < 5400) return `${Math.round(seconds / 60)} min ago`;
  return `${Math.round(seconds / 3600)} h ago`;
}

export interface ObjectiveRow {
  name: string;
  before: string;
  after: string;
}

const UNITS: Record<Axis, [string, number]> = { P: ["W", 1], D: ["", 2], C: ["B/s", 3], M: ["GiB", 2] };

/** P, D, C, M before → after from a plan's summary (`objectives.before/after`, raw
 * values as clavisd stores them); nothing when the summary has none. */
export function objectiveRows(summary: Record<string, unknown>): ObjectiveRow[] {
  const o = summary.objectives as { before?: Partial<Values>; after?: Partial<Values> } | undefined;
  if (!o?.before || !o.after) return [];
  return (["P", "D", "C", "M"] as Axis[]).map((k) => {
    const [unit, digits] = UNITS[k];
    const show = (x: number | undefined) => {
      if (x === undefined) return "—";
      if (k === "M") return `${(x / 2 ** 30).toFixed(2)} GiB`; // memory moved, bytes
      return `${k === "C" ? x.toPrecision(digits) : x.toFixed(digits)}${unit ? ` ${unit}` : ""}`;
    };
    return { name: k, before: show(o.before?.[k]), after: show(o.after?.[k]) };
  });
}

export type HistoryKind = "calibration" | "plan" | "class";

export interface HistoryEntry {
  kind: HistoryKind;
  ts: number;
  who: string; // user, or the container for a class change
  what: string;
  detail: string;
}

/** The History page's filter: entries of the chosen kinds whose words contain every word
 * of the query (case-insensitive), newest first. */
export function filterHistory(
  entries: HistoryEntry[],
  query: string,
  kinds: ReadonlySet<HistoryKind>,
): HistoryEntry[] {
  const words = query.toLowerCase().split(/\s+/).filter(Boolean);
  return entries
    .filter((e) => kinds.has(e.kind))
    .filter((e) => {
      const text = `${e.kind} ${e.who} ${e.what} ${e.detail}`.toLowerCase();
      return words.every((w) => text.includes(w));
    })
    .sort((a, b) => b.ts - a.ts);
}
