// The Pareto screens: one ECharts scatter per pair of objectives, linked so that hovering
// or picking a schedule on one shows it on all (thesis §5.5.1, after Vismon).
import * as echarts from "echarts/core";
import { LineChart, ParallelChart, ScatterChart } from "echarts/charts";
import { GridComponent, ParallelComponent, TooltipComponent } from "echarts/components";
import { CanvasRenderer } from "echarts/renderers";
import { COLOURS, indexById, screenData, type Axis, type FrontLike } from "./shape";

echarts.use([
  ScatterChart,
  LineChart,
  ParallelChart,
  GridComponent,
  ParallelComponent,
  TooltipComponent,
  CanvasRenderer,
]);

export interface Screens {
  setPicks(ids: readonly number[]): void;
  /** Chart pixel of a schedule on screen k, relative to that chart's element. */
  pixelOf(k: number, id: number): [number, number] | null;
  charts: HTMLElement[];
  dispose(): void;
}

const NAMES: Record<Axis, string> = {
  P: "P power",
  D: "D contention",
  C: "C slow-link traffic",
  M: "M migration",
};

export function paretoScreens(
  container: HTMLElement,
  front: FrontLike,
  pairs: [Axis, Axis][],
  onHover: (id: number | null) => void,
  onClick: (id: number) => void,
): Screens {
  const index = indexById(front);
  const els: HTMLElement[] = [];
  // The lit schedule is a mark of our own over each screen's canvas, moved to the
  // schedule's pixel: lighting one leaves the charts' canvases alone. ECharts' own
  // highlight (emphasis) repaints a chart's whole canvas, all 2,000 points: on three
  // screens and the parallel view that took about 60 ms a hover, plus uploading the four
  // canvases (docs/ui.md, Speed).
  const marks: HTMLElement[] = [];
  let lit: number | null = null;
  const place = (k: number) => {
    const mark = marks[k];
    const pair = pairs[k];
    const p = lit === null ? undefined : front.points[lit];
    const px = p && pair ? charts[k]?.convertToPixel({ seriesIndex: 0 }, [p.normalised[pair[0]], p.normalised[pair[1]]]) : null;
    if (!mark) return;
    if (!px) {
      mark.hidden = true;
      return;
    }
    mark.style.transform = `translate(${px[0] as number}px, ${px[1] as number}px)`;
    mark.hidden = false;
  };
  const light = (i: number | null) => {
    lit = i;
    marks.forEach((_, k) => place(k));
  };
  const charts = pairs.map(([x, y]) => {
    const el = document.createElement("div");
    el.className = "screen";
    el.setAttribute("role", "img");
    el.setAttribute("aria-label", `schedules by ${NAMES[x]} and ${NAMES[y]}; click one to pick it`);
    el.dataset.screen = `${x}-${y}`;
    container.append(el);
    els.push(el);
    const chart = echarts.init(el, undefined, { renderer: "canvas" });
    chart.setOption({
      animation: false,
      grid: { left: 48, right: 12, top: 28, bottom: 40 },
      title: undefined,
      tooltip: {
        trigger: "item",
        formatter: (p: { data: number[] }) =>
          `schedule ${p.data[2]}<br>${x} ${Number(p.data[0]).toFixed(3)} · ${y} ${Number(p.data[1]).toFixed(3)}`,
      },
      xAxis: { name: NAMES[x], nameLocation: "middle", nameGap: 24, min: 0, max: 1 },
      yAxis: { name: NAMES[y], nameLocation: "end", min: 0, max: 1 },
      series: [
        {
          id: "all",
          type: "scatter",
          data: screenData(front, x, y),
          symbolSize: 9,
          itemStyle: { color: COLOURS.point, borderColor: "#1a1a1a", borderWidth: 0.5 },
          // Lit by the mark above instead (on every screen alike).
          emphasis: { disabled: true },
          large: false,
        },
        {
          id: "picked",
          type: "scatter",
          data: [],
          symbol: "diamond",
          symbolSize: 14,
          itemStyle: { color: COLOURS.picked, borderColor: "#fff", borderWidth: 1.5 },
          z: 3,
          silent: false,
        },
      ],
    });
    const mark = document.createElement("div");
    mark.className = "lit";
    mark.hidden = true;
    mark.setAttribute("aria-hidden", "true");
    el.append(mark);
    marks.push(mark);
    chart.on("mouseover", (p) => {
      const id = (p.data as number[])[2];
      if (id === undefined) return;
      onHover(id);
      light(index.get(id) ?? null);
    });
    chart.on("mouseout", () => {
      onHover(null);
      light(null);
    });
    chart.on("click", (p) => {
      const id = (p.data as number[])[2];
      if (id !== undefined) onClick(id);
    });
    return chart;
  });
  const ro = new ResizeObserver(() => {
    charts.forEach((c) => c.resize());
    light(lit);
  });
  els.forEach((e) => ro.observe(e));
  return {
    charts: els,
    setPicks(ids) {
      const picked = new Set(ids);
      pairs.forEach(([x, y], k) => {
        const data = screenData(front, x, y).filter((d) => picked.has(d[2]));
        charts[k]?.setOption({ series: [{ id: "picked", data }] });
      });
    },
    pixelOf(k, id) {
      const pair = pairs[k];
      const i = index.get(id);
      const p = i === undefined ? undefined : front.points[i];
      const chart = charts[k];
      if (!pair || !p || !chart) return null;
      const px = chart.convertToPixel({ seriesIndex: 0 }, [p.normalised[pair[0]], p.normalised[pair[1]]]);
      return px ? [px[0] as number, px[1] as number] : null;
    },
    dispose() {
      ro.disconnect();
      charts.forEach((c) => c.dispose());
    },
  };
}

/** The live hypervolume curve of a running front. */
export function hypervolumeCurve(el: HTMLElement): {
  add(gen: number, hv: number): void;
  dispose(): void;
} {
  const chart = echarts.init(el, undefined, { renderer: "canvas" });
  const data: [number, number][] = [];
  chart.setOption({
    animation: false,
    grid: { left: 56, right: 12, top: 24, bottom: 32 },
    xAxis: { type: "value", name: "generation", nameLocation: "middle", nameGap: 22, minInterval: 1 },
    yAxis: { type: "value", name: "hypervolume", scale: true },
    series: [{ type: "line", data, showSymbol: false, lineStyle: { color: COLOURS.turtle, width: 2 } }],
  });
  return {
    add(gen, hv) {
      data.push([gen, hv]);
      chart.setOption({ series: [{ data }] });
    },
    dispose: () => chart.dispose(),
  };
}

/** Every schedule as a line across all objectives (parallel coordinates); the picks drawn
 * black and thick, the hovered schedule highlighted. */
export function parallelView(
  el: HTMLElement,
  front: FrontLike,
  objectives: Axis[],
): { hover(id: number | null): void; setPicks(ids: readonly number[]): void; dispose(): void } {
  const chart = echarts.init(el, undefined, { renderer: "canvas" });
  const index = indexById(front);
  const row = (p: FrontLike["points"][number]) => objectives.map((a) => p.normalised[a]);
  let lit: number | undefined;
  chart.setOption({
    animation: false,
    // Highlights drawn on a layer of their own (all of them, not only past 3,000
    // elements): lighting a line repaints that line, not the 2,000 under it.
    hoverLayerThreshold: 0,
    parallel: { left: 40, right: 60, top: 30, bottom: 24 },
    parallelAxis: objectives.map((a, dim) => ({ dim, name: NAMES[a], min: 0, max: 1 })),
    series: [
      {
        id: "all",
        type: "parallel",
        data: front.points.map(row),
        lineStyle: { color: COLOURS.point, width: 1, opacity: 0.6 },
        emphasis: { lineStyle: { color: COLOURS.hovered, width: 3, opacity: 1 } },
      },
      { id: "picked", type: "parallel", data: [], lineStyle: { color: COLOURS.picked, width: 2.5, opacity: 1 } },
    ],
  });
  return {
    hover(id) {
      // Only the previous line is downplayed (a whole series would restyle every line).
      if (lit !== undefined) chart.dispatchAction({ type: "downplay", seriesIndex: 0, dataIndex: lit });
      lit = id === null ? undefined : index.get(id);
      if (lit !== undefined) chart.dispatchAction({ type: "highlight", seriesIndex: 0, dataIndex: lit });
    },
    setPicks(ids) {
      const picked = new Set(ids);
      chart.setOption({ series: [{ id: "picked", data: front.points.filter((p) => picked.has(p.id)).map(row) }] });
    },
    dispose: () => chart.dispose(),
  };
}
