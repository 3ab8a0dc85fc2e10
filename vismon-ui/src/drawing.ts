// The placement drawing: racks → hosts → containers coloured (and shaped) by class, with
// lines for heavy traffic across slow links (between racks).
import { placementLayout, SIZES, type ClusterDoc, type WorkloadDoc } from "./layout";
import { classColour } from "./shape";

const NS = "http://www.w3.org/2000/svg";

function el(tag: string, attrs: Record<string, string | number>, text?: string): SVGElement {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

export function drawPlacement(
  cluster: ClusterDoc,
  workload: WorkloadDoc,
  assignment: Record<string, string>,
  label: string,
): SVGSVGElement {
  const L = placementLayout(cluster, workload, assignment);
  const svg = el("svg", { viewBox: `0 0 ${L.width} ${L.height}`, width: L.width, height: L.height, role: "img", "aria-label": label }) as SVGSVGElement;
  svg.classList.add("placement");
  // Grown to its panel's width (style.css), at most twice its own size: text stays readable.
  svg.style.minWidth = `${L.width}px`;
  svg.style.maxWidth = `${2 * L.width}px`;
  for (const r of L.racks) {
    svg.append(el("rect", { x: r.x, y: r.y, width: r.w, height: r.h, rx: 6, fill: "#f2f2f2", stroke: "#bbb" }));
    svg.append(el("text", { x: r.x + 8, y: 15, "font-size": 12, "font-weight": "bold" }, `rack ${r.name}`));
  }
  for (const hbox of L.hosts) {
    svg.append(el("rect", { x: hbox.x, y: hbox.y, width: hbox.w, height: hbox.h, rx: 4, fill: "#fff", stroke: hbox.contended ? classColour("devil", true) : "#999", "stroke-width": hbox.contended ? 2.5 : 1 }));
    svg.append(el("text", { x: hbox.x + 4, y: hbox.y + 13, "font-size": 11 }, hbox.name + (hbox.contended ? " (contended)" : "")));
  }
  for (const l of L.links) {
    const line = el("line", { x1: l.x1, y1: l.y1, x2: l.x2, y2: l.y2, stroke: "#1a1a1a", "stroke-width": l.width, "stroke-dasharray": "6 3", opacity: 0.7 });
    line.append(el("title", {}, `${l.src} → ${l.dst}: ${(l.bytes_per_s / 1e6).toFixed(1)} MB/s across racks`));
    svg.append(line);
  }
  const r = SIZES.dot / 2;
  for (const d of L.dots) {
    const colour = classColour(d.klass, d.contended);
    // Shape repeats the class: circle turtle, triangle devil, diamond contended devil,
    // square unknown.
    const shape =
      d.klass === "devil"
        ? el("polygon", {
            points: d.contended
              ? `${d.x},${d.y - r} ${d.x + r},${d.y} ${d.x},${d.y + r} ${d.x - r},${d.y}`
              : `${d.x},${d.y - r} ${d.x + r},${d.y + r} ${d.x - r},${d.y + r}`,
            fill: colour,
            stroke: "#1a1a1a",
          })
        : d.klass === "unknown"
          ? el("rect", { x: d.x - r + 2, y: d.y - r + 2, width: 2 * r - 4, height: 2 * r - 4, fill: colour, stroke: "#1a1a1a" })
          : el("circle", { cx: d.x, cy: d.y, r: r - 1, fill: colour, stroke: "#1a1a1a" });
    shape.append(el("title", {}, `${d.name} (job ${d.job}): ${d.contended ? "contended devil" : d.klass} on ${d.host}`));
    svg.append(shape);
  }
  return svg;
}
