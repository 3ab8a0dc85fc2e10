import { describe, expect, it } from "vitest";
import {
  COLOURS,
  SseParser,
  ago,
  classColour,
  filterHistory,
  hostRows,
  indexById,
  objectiveRows,
  outcomeRows,
  pickProblem,
  progressShare,
  screenData,
  screens,
  togglePick,
  type ContainerLike,
  type FrontLike,
} from "../src/shape";

const v = (P: number, D: number, C: number, M = 0) => ({ P, D, C, M });
const front: FrontLike = {
  search: { objectives: ["P", "D", "C"] },
  points: [
    { id: 7, assignment: {}, raw: v(300, 2, 10), normalised: v(0.1, 0.9, 0.5) },
    { id: 2, assignment: {}, raw: v(400, 1, 20), normalised: v(0.6, 0.2, 0.7) },
    { id: 4, assignment: {}, raw: v(500, 0, 5), normalised: v(0.9, 0.0, 0.1) },
  ],
};

describe("Pareto screens", () => {
  it("pairs every two objectives: three screens, six with M", () => {
    expect(screens(["P", "D", "C"])).toEqual([["P", "D"], ["P", "C"], ["D", "C"]]);
    expect(screens(["P", "D", "C", "M"])).toHaveLength(6);
  });

  it("keeps the front's order on every screen so one index names one schedule", () => {
    const pd = screenData(front, "P", "D");
    const dc = screenData(front, "D", "C");
    expect(pd.map((d) => d[2])).toEqual([7, 2, 4]);
    expect(dc.map((d) => d[2])).toEqual([7, 2, 4]);
    expect(pd[1]).toEqual([0.6, 0.2, 2]);
    expect(dc[2]).toEqual([0.0, 0.1, 4]);
    expect(indexById(front).get(4)).toBe(2);
  });

  it("toggles picks and says how many more are needed", () => {
    let picks = togglePick([], 7);
    picks = togglePick(picks, 2);
    expect(pickProblem(picks)).toBe("pick 1 more schedule (at least 3)");
    picks = togglePick(picks, 7);
    expect(picks).toEqual([2]);
    expect(pickProblem(picks)).toBe("pick 2 more schedules (at least 3)");
    expect(pickProblem([1, 2, 3])).toBeNull();
  });
});

describe("colours", () => {
  it("never pairs red with green and tells every class apart", () => {
    const shown = [
      classColour("turtle", false),
      classColour("devil", false),
      classColour("devil", true),
      classColour("unknown", false),
    ];
    expect(new Set(shown).size).toBe(4);
    // Okabe-Ito: no pure red or pure green hue among them.
    for (const c of shown) {
      const [r, g, b] = [1, 3, 5].map((i) => parseInt(c.slice(i, i + 2), 16));
      const redOnly = r! > 200 && g! < 60 && b! < 60;
      const greenOnly = g! > 200 && r! < 60 && b! < 60;
      expect(redOnly || greenOnly).toBe(false);
    }
    expect(classColour("turtle", true)).toBe(COLOURS.turtle);
  });
});

describe("cluster rows", () => {
  const c = (name: string, host: string, k: ContainerLike["effective_class"], cores = 2): ContainerLike => ({
    name, host, job: "j", cores, intensity_mpki: 1, effective_class: k, effective_source: "samples",
  });
  it("groups containers by host, sorts by rack and name, marks contention and silence", () => {
    const now = 1000;
    const rows = hostRows(
      [
        { name: "h2", rack: "r1", cores: 8, last_report: 990, busy_cores: 4, watts: 150 },
        { name: "h1", rack: "r1", cores: 8, last_report: 500, busy_cores: 2, watts: null },
        { name: "h0", rack: "r2", cores: 8, last_report: null, busy_cores: null, watts: null },
      ],
      [c("b", "h2", "devil"), c("a", "h2", "devil", 4), c("t", "h1", "turtle")],
      now,
      120,
    );
    expect(rows.map((r) => r.name)).toEqual(["h1", "h2", "h0"]);
    const [h1, h2, h0] = rows;
    expect(h2!.containers.map((x) => x.name)).toEqual(["a", "b"]);
    expect(h2!.usedCores).toBe(6);
    expect(h2!.contended).toBe(true);
    expect(h1!.contended).toBe(false);
    expect([h1!.reporting, h2!.reporting, h0!.reporting]).toEqual(["silent", "fresh", "never"]);
  });
});

describe("calibration table", () => {
  it("formats both methods and shows a failed one's reason", () => {
    const rows = outcomeRows(
      [
        { method: "thesis", error: "the picks are rank-deficient" },
        { method: "inverse", weights: { P: 0.5, D: 0.25, C: 0.25, M: 0 }, residual: 0, regret: 0.01234 },
      ],
      "inverse",
    );
    expect(rows[0]).toMatchObject({ method: "thesis", error: "the picks are rank-deficient", recommended: false });
    expect(rows[1]!.cells).toEqual(["0.5000", "0.2500", "0.2500", "0.0000", "0.0000", "0.0123"]);
    expect(rows[1]!.recommended).toBe(true);
  });
});

describe("progress", () => {
  it("is the share of generations done, clamped", () => {
    expect(progressShare(null, 10)).toBe(0);
    const p = { generation: 5, evaluations: 50, hypervolume: 0.3, front_size: 4 };
    expect(progressShare(p, 10)).toBe(0.5);
    expect(progressShare({ ...p, generation: 12 }, 10)).toBe(1);
  });

  it("says how old things are", () => {
    expect(ago(null)).toBe("never");
    expect(ago(3.4)).toBe("3 s ago");
    expect(ago(600)).toBe("10 min ago");
    expect(ago(7200)).toBe("2 h ago");
  });
});

describe("SSE parser", () => {
  it("parses events split across chunks, skips comments, handles CRLF", () => {
    const p = new SseParser();
    expect(p.feed("event: progress\ndata: {\"generation\":")).toEqual([]);
    expect(p.feed("1}\n\n: still running\n\nevent: end\r\ndata: {}\r\n\r\n")).toEqual([
      { event: "progress", data: '{"generation":1}' },
      { event: "end", data: "{}" },
    ]);
    expect(p.feed("data: a\ndata: b\n\n")).toEqual([{ event: "message", data: "a\nb" }]);
  });
});

describe("plan objectives", () => {
  it("shows P, D, C, M before and after with units, nothing without them", () => {
    const rows = objectiveRows({
      objectives: { before: { P: 612.34, D: 4, C: 123456, M: 0 }, after: { P: 580, D: 0, C: 0, M: 3 * 2 ** 30 } },
    });
    expect(rows.map((r) => r.name)).toEqual(["P", "D", "C", "M"]);
    expect(rows[0]).toEqual({ name: "P", before: "612.3 W", after: "580.0 W" });
    expect(rows[2]).toEqual({ name: "C", before: "1.23e+5 B/s", after: "0.00 B/s" });
    expect(rows[3]).toEqual({ name: "M", before: "0.00 GiB", after: "3.00 GiB" });
    expect(objectiveRows({ message: "no objectives" })).toEqual([]);
  });
});

describe("history filter", () => {
  const entries = [
    { kind: "calibration" as const, ts: 10, who: "ada", what: "weights #1 (thesis)", detail: "P 0.3" },
    { kind: "plan" as const, ts: 30, who: "clavisd", what: "plan #4 done", detail: "a1 h1→h2 done" },
    { kind: "class" as const, ts: 20, who: "a1", what: "devil", detail: "job a, from samples" },
  ];
  const all = new Set(["calibration", "plan", "class"] as const);
  it("lists newest first and keeps entries with every word", () => {
    expect(filterHistory(entries, "", all).map((e) => e.ts)).toEqual([30, 20, 10]);
    expect(filterHistory(entries, "A1", all).map((e) => e.kind)).toEqual(["plan", "class"]);
    expect(filterHistory(entries, "a1 devil", all).map((e) => e.kind)).toEqual(["class"]);
    expect(filterHistory(entries, "nobody", all)).toEqual([]);
  });
  it("keeps only the chosen kinds", () => {
    expect(filterHistory(entries, "", new Set(["calibration"] as const)).map((e) => e.who)).toEqual(["ada"]);
  });
});
