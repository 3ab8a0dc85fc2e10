// Where the placement drawing puts racks, hosts, containers and slow-link flows: pure
// geometry (tested in tests/layout.test.ts); src/drawing.ts turns it into SVG.
import type { Klass } from "./shape";

export interface ClusterDoc {
  hosts: { name: string; rack: string; cores: number }[];
}
export interface WorkloadDoc {
  devil_threshold_mpki: number;
  jobs: {
    name: string;
    containers: { name: string; intensity_mpki: number; class?: Klass | null }[];
    traffic?: { src: string; dst: string; bytes_per_s: number }[];
  }[];
}

export interface Box {
  name: string;
  x: number;
  y: number;
  w: number;
  h: number;
}
export interface Dot {
  name: string;
  job: string;
  host: string;
  x: number;
  y: number;
  klass: Klass;
  contended: boolean;
}
export interface Link {
  src: string;
  dst: string;
  bytes_per_s: number;
  width: number;
  x1: number;
  y1: number;
  x2: number;
  y2: number;
}
export interface Layout {
  width: number;
  height: number;
  racks: Box[];
  hosts: (Box & { contended: boolean })[];
  dots: Dot[];
  links: Link[];
}

export const SIZES = { rackGap: 24, hostW: 150, hostH: 44, hostGap: 8, pad: 22, dot: 14 };

/** A container's class as the solver sees it: its given class, else its intensity
 * against the workload's threshold (docs/objectives.md). The Cluster page gives clavisd's
 * effective class, which may be unknown. */
export function classOf(c: WorkloadDoc["jobs"][number]["containers"][number], threshold: number): Klass {
  if (c.class) return c.class;
  return c.intensity_mpki >= threshold ? "devil" : "turtle";
}

/** Racks side by side, their hosts stacked, containers as dots in their host; a host
 * with more than one devil is contended. Links are the flows between containers on
 * different racks (the slow links C counts), those at least ``heavyShare`` of the largest,
 * widths 1..6 by volume. Containers on no known host are left out. */
export function placementLayout(
  cluster: ClusterDoc,
  workload: WorkloadDoc,
  assignment: Record<string, string>,
  heavyShare = 0.1,
): Layout {
  const { rackGap, hostW, hostH, hostGap, pad, dot } = SIZES;
  const racks = [...new Set(cluster.hosts.map((h) => h.rack))];
  const rackOf = new Map(cluster.hosts.map((h) => [h.name, h.rack]));
  const hostBoxes: Layout["hosts"] = [];
  const hostPos = new Map<string, Box>();
  const rackBoxes: Box[] = racks.map((rack, i) => {
    const members = cluster.hosts.filter((h) => h.rack === rack);
    const x = i * (hostW + 2 * 8 + rackGap);
    members.forEach((h, j) => {
      const box = { name: h.name, x: x + 8, y: pad + j * (hostH + hostGap), w: hostW, h: hostH, contended: false };
      hostBoxes.push(box);
      hostPos.set(h.name, box);
    });
    return { name: rack, x, y: 0, w: hostW + 16, h: pad + members.length * (hostH + hostGap) };
  });
  const dots: Dot[] = [];
  const perHost = new Map<string, number>();
  for (const job of workload.jobs) {
    for (const c of job.containers) {
      const host = assignment[c.name];
      const box = host === undefined ? undefined : hostPos.get(host);
      if (!box || host === undefined) continue;
      const k = perHost.get(host) ?? 0;
      perHost.set(host, k + 1);
      const perRow = Math.max(1, Math.floor((hostW - 8) / (dot + 4)));
      dots.push({
        name: c.name,
        job: job.name,
        host,
        x: box.x + 4 + dot / 2 + (k % perRow) * (dot + 4),
        y: box.y + 20 + dot / 2 + Math.floor(k / perRow) * (dot + 2),
        klass: classOf(c, workload.devil_threshold_mpki),
        contended: false,
      });
    }
  }
  for (const box of hostBoxes) {
    const devils = dots.filter((d) => d.host === box.name && d.klass === "devil");
    box.contended = devils.length > 1;
    for (const d of devils) d.contended = box.contended;
  }
  const at = new Map(dots.map((d) => [d.name, d]));
  const cross = workload.jobs
    .flatMap((j) => j.traffic ?? [])
    .filter((f) => {
      const a = at.get(f.src);
      const b = at.get(f.dst);
      return a && b && rackOf.get(a.host) !== rackOf.get(b.host) && f.bytes_per_s > 0;
    });
  const top = Math.max(0, ...cross.map((f) => f.bytes_per_s));
  const links = cross
    .filter((f) => f.bytes_per_s >= heavyShare * top)
    .map((f) => {
      const a = at.get(f.src) as Dot;
      const b = at.get(f.dst) as Dot;
      return { src: f.src, dst: f.dst, bytes_per_s: f.bytes_per_s, width: 1 + 5 * (f.bytes_per_s / top), x1: a.x, y1: a.y, x2: b.x, y2: b.y };
    });
  const width = racks.length * (hostW + 16 + rackGap) - rackGap;
  const height = Math.max(0, ...rackBoxes.map((r) => r.h)) + 4;
  return { width: Math.max(width, 0), height, racks: rackBoxes, hosts: hostBoxes, dots, links };
}

export interface LiveContainer {
  name: string;
  host: string;
  job: string | null;
  intensity_mpki: number | null;
  effective_class: Klass;
  traffic: Record<string, number>;
}

/** The Cluster page's drawing input from clavisd's /hosts and /containers: containers
 * grouped by job (a container without one is its own), classed as clavisd treats them,
 * and their traffic to peers of the same job (C counts only a job's own flows). */
export function liveDocs(
  hosts: { name: string; rack: string; cores: number }[],
  containers: LiveContainer[],
): { cluster: ClusterDoc; workload: WorkloadDoc; assignment: Record<string, string> } {
  const jobs = new Map<string, LiveContainer[]>();
  for (const c of containers) {
    const key = c.job ?? `node-${c.name}`;
    jobs.set(key, [...(jobs.get(key) ?? []), c]);
  }
  return {
    cluster: { hosts: hosts.map((h) => ({ name: h.name, rack: h.rack, cores: h.cores })) },
    workload: {
      devil_threshold_mpki: Infinity, // every container carries its class
      jobs: [...jobs.entries()].map(([name, cs]) => {
        const members = new Set(cs.map((c) => c.name));
        return {
          name,
          containers: cs.map((c) => ({ name: c.name, intensity_mpki: c.intensity_mpki ?? 0, class: c.effective_class })),
          traffic: cs.flatMap((c) =>
            Object.entries(c.traffic)
              .filter(([peer, bps]) => members.has(peer) && bps > 0)
              .map(([peer, bps]) => ({ src: c.name, dst: peer, bytes_per_s: bps })),
          ),
        };
      }),
    },
    assignment: Object.fromEntries(containers.map((c) => [c.name, c.host])),
  };
}
