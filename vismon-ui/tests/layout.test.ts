import { describe, expect, it } from "vitest";
import { classOf, liveDocs, placementLayout, type ClusterDoc, type WorkloadDoc } from "../src/layout";

const cluster: ClusterDoc = {
  hosts: [
    { name: "h1", rack: "r1", cores: 8 },
    { name: "h2", rack: "r0", cores: 8 },
    { name: "h3", rack: "r1", cores: 8 },
  ],
};
const workload: WorkloadDoc = {
  devil_threshold_mpki: 4.5,
  jobs: [
    {
      name: "a",
      containers: [
        { name: "a1", intensity_mpki: 20 },
        { name: "a2", intensity_mpki: 20 },
      ],
      traffic: [
        { src: "a1", dst: "a2", bytes_per_s: 1e8 },
        { src: "a2", dst: "a1", bytes_per_s: 1e6 },
      ],
    },
    { name: "b", containers: [{ name: "b1", intensity_mpki: 1, class: "devil" }, { name: "b2", intensity_mpki: 9, class: "turtle" }] },
  ],
};

describe("placement layout", () => {
  it("classes from the given class, else the intensity", () => {
    expect(classOf({ name: "x", intensity_mpki: 5 }, 4.5)).toBe("devil");
    expect(classOf({ name: "x", intensity_mpki: 4 }, 4.5)).toBe("turtle");
    expect(classOf({ name: "x", intensity_mpki: 9, class: "turtle" }, 4.5)).toBe("turtle");
  });

  it("puts racks side by side, hosts inside their rack, dots inside their host", () => {
    const L = placementLayout(cluster, workload, { a1: "h1", b1: "h1", a2: "h2", b2: "h3" });
    expect(L.racks.map((r) => r.name)).toEqual(["r1", "r0"]);
    const rack = (n: string) => L.racks.find((r) => r.name === n)!;
    for (const hb of L.hosts) {
      const r = rack(cluster.hosts.find((h) => h.name === hb.name)!.rack);
      expect(hb.x >= r.x && hb.x + hb.w <= r.x + r.w && hb.y + hb.h <= r.y + r.h).toBe(true);
    }
    for (const d of L.dots) {
      const hb = L.hosts.find((b) => b.name === d.host)!;
      expect(d.x > hb.x && d.x < hb.x + hb.w && d.y > hb.y && d.y < hb.y + hb.h).toBe(true);
    }
    expect(L.width).toBeGreaterThanOrEqual(Math.max(...L.racks.map((r) => r.x + r.w)));
  });

  it("marks two devils on a host contended, and draws only heavy cross-rack flows", () => {
    const L = placementLayout(cluster, workload, { a1: "h1", b1: "h1", a2: "h2", b2: "h3" });
    expect(L.hosts.find((b) => b.name === "h1")!.contended).toBe(true);
    expect(L.dots.filter((d) => d.contended).map((d) => d.name).sort()).toEqual(["a1", "b1"]);
    // a2 -> a1 is 1% of the largest flow: below the 10% share, not drawn.
    expect(L.links.map((l) => [l.src, l.dst])).toEqual([["a1", "a2"]]);
    expect(L.links[0]!.width).toBe(6);
    // Same rack: no slow link, no line.
    expect(placementLayout(cluster, workload, { a1: "h1", a2: "h3", b1: "h2", b2: "h2" }).links).toEqual([]);
  });
});

describe("the live cluster's drawing", () => {
  it("groups clavisd's containers by job, keeps their classes and same-job traffic", () => {
    const live = (name: string, host: string, job: string | null, k: "devil" | "turtle" | "unknown", traffic = {}) => ({
      name, host, job, intensity_mpki: null, effective_class: k, traffic,
    });
    const docs = liveDocs(cluster.hosts, [
      live("a1", "h1", "a", "devil", { a2: 5e7, x9: 1e9 }),
      live("a2", "h2", "a", "devil"),
      live("n1", "h3", null, "unknown"),
    ]);
    expect(docs.workload.jobs.map((j) => j.name)).toEqual(["a", "node-n1"]);
    expect(docs.workload.jobs[0]!.traffic).toEqual([{ src: "a1", dst: "a2", bytes_per_s: 5e7 }]);
    expect(docs.assignment).toEqual({ a1: "h1", a2: "h2", n1: "h3" });
    const L = placementLayout(docs.cluster, docs.workload, docs.assignment);
    expect(L.dots.find((d) => d.name === "n1")!.klass).toBe("unknown");
    expect(L.links).toHaveLength(1); // h1 (r1) to h2 (r0): a slow link
  });
});
