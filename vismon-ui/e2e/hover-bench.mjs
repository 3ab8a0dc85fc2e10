// Hover latency of the Calibrate page on a large front (issue 16: "a front of 2,000
// schedules stays responsive, hover under 50 ms"). Run by bench/ui/hover_bench.py, which
// starts clavisd with such a front stored and passes CLAVIS_URL, HOVERS and OUT.
// Each sample: a mousemove dispatched on the P-D screen at a schedule's point, timed in the
// page from the event to the second animation frame after it (the hover text set, the
// other screens and the parallel view highlighted, the placement drawn, and painted).
// Also timed: the event's synchronous handlers alone, and a move over no schedule to the
// second frame after it (what the two frames cost when a hover does nothing).
// With PROFILE set, the hovers are recorded as a Chrome trace there (timeline and sampled
// JS profile), which bench/ui/hover_bench.py --profile sums up.
import { writeFileSync } from "node:fs";
import { chromium } from "playwright-core";

const base = process.env.CLAVIS_URL;
const hovers = Number(process.env.HOVERS ?? "200");
const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
  ],
});
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  page.setDefaultTimeout(60000);
  await page.goto(`${base}/ui/`);
  await page.fill("#user", "ada");
  await page.fill("#password", "admin-pass");
  await page.click("form.login button[type=submit]");
  await page.waitForFunction(() => (window.vismon?.ids.length ?? 0) > 0 && document.querySelectorAll(".screen canvas").length >= 3);
  const profile = process.env.PROFILE;
  if (profile) {
    await browser.startTracing(page, {
      path: profile,
      categories: [
        "devtools.timeline", "disabled-by-default-devtools.timeline", "v8.execute",
        "disabled-by-default-v8.cpu_profiler", "blink", "cc", "gpu",
      ],
    });
  }
  const result = await page.evaluate(async (n) => {
    const v = window.vismon;
    const screen = document.querySelectorAll(".screen")[0];
    screen.scrollIntoView();
    const canvas = screen.querySelector("canvas");
    const frame = () => new Promise((r) => requestAnimationFrame(() => r()));
    const hoverText = document.querySelector(".hover");
    const move = (x, y) => canvas.dispatchEvent(new MouseEvent("mousemove", { clientX: x, clientY: y, bubbles: true }));
    const out = [];
    const handler = [];
    const floor = [];
    let missed = 0;
    for (let k = 0; k < n; k++) {
      const id = v.ids[(k * 7919) % v.ids.length];
      const p = v.screens.pixelOf(0, id);
      const box = canvas.getBoundingClientRect();
      const t0 = performance.now();
      move(box.left + p[0], box.top + p[1]);
      handler.push(performance.now() - t0); // the event's own handlers, synchronous
      await frame();
      await frame();
      out.push(performance.now() - t0);
      if (!hoverText.textContent.startsWith("Schedule ")) missed++;
      move(box.left + 2, box.top + 2);
      await frame();
      // The same measure of a move over nothing: the two frames' own cadence.
      const t1 = performance.now();
      move(box.left + 3, box.top + 3);
      await frame();
      await frame();
      floor.push(performance.now() - t1);
    }
    return { samples: out, handler, floor, missed, points: v.ids.length };
  }, hovers);
  if (profile) await browser.stopTracing();
  writeFileSync(process.env.OUT ?? "hover.json", JSON.stringify(result));
  console.log(`hovered ${result.samples.length} times on ${result.points} schedules, ${result.missed} missed`);
} finally {
  await browser.close();
}
