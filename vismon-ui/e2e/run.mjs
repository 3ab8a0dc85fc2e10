// End-to-end test of vismon in Debian's chromium, driven by playwright-core (no browser is
// downloaded), against a real clavisd with a seeded store. Started by
// solver/tests/service/test_ui_e2e.py, which starts that clavisd and passes
//   CLAVIS_URL   the clavisd base URL (it serves the built UI at /ui/)
//   ARTIFACTS    where the screenshots go
// Every step is bounded in time; the first failure ends the run with exit code 1.
import { mkdirSync } from "node:fs";
import { chromium } from "playwright-core";

const base = process.env.CLAVIS_URL;
const out = process.env.ARTIFACTS ?? "e2e-artifacts";
if (!base) {
  console.error("e2e: CLAVIS_URL is not set");
  process.exit(2);
}
mkdirSync(out, { recursive: true });

let passed = 0;
async function step(name, f) {
  const t0 = Date.now();
  await f();
  passed++;
  console.log(`ok ${passed} - ${name} (${Date.now() - t0} ms)`);
}
function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
}

const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
  ],
});
const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
page.setDefaultTimeout(20000);
const errors = [];
page.on("pageerror", (e) => errors.push(String(e)));
const shotOf = (p, name) => p.screenshot({ path: `${out}/${name}.png`, fullPage: true });
const shot = (name) => shotOf(page, name);

/** GET an API path with the page's own session, as the page would. */
function apiGet(p, path) {
  return p.evaluate(async (path) => {
    const s = JSON.parse(sessionStorage.getItem("clavis.session"));
    const r = await fetch(path, { headers: { Authorization: `Bearer ${s.token}` } });
    return { status: r.status, body: await r.json() };
  }, path);
}

/** Elements of the page (shown ones) whose right edge is past the viewport, and how wide
 *  the document is against the viewport: nothing may need a horizontal scroll. */
function horizontalOverflow(p) {
  return p.evaluate(() => {
    const vw = document.documentElement.clientWidth;
    const past = [...document.querySelectorAll("body *")]
      .filter((e) => e.getClientRects().length > 0 && window.getComputedStyle(e).visibility !== "hidden")
      .filter((e) => e.getBoundingClientRect().right > vw + 0.5)
      .map((e) => `${e.tagName.toLowerCase()}.${[...e.classList].join(".")}#${e.id} right ${e.getBoundingClientRect().right.toFixed(0)}`);
    return { vw, scrollWidth: document.documentElement.scrollWidth, past: past.slice(0, 5) };
  });
}

/** Keyboard focus and labels (issue 16, Quality) on page p as it stands: every shown
 *  control (input, button, select, textarea, link) has an accessible name, as playwright's
 *  aria snapshot computes it and its role locator finds it by (label, aria-label or text);
 *  and Tab, pressed from the top of the page, reaches every enabled one, each showing a
 *  visible focus indicator (a computed outline or box-shadow) while focused. */
async function keyboardAudit(p, where) {
  const n = await p.evaluate(() => {
    const shown = (e) => e.getClientRects().length > 0 && window.getComputedStyle(e).visibility !== "hidden";
    const els = [...document.querySelectorAll("input, button, select, textarea, a[href]")].filter(shown);
    document.querySelectorAll("[data-audit]").forEach((e) => e.removeAttribute("data-audit"));
    els.forEach((e, i) => e.setAttribute("data-audit", String(i)));
    return els.length;
  });
  check(n >= 1, `${where}: controls to check`);
  const enabled = [];
  const describe = (i) => p.$eval(`[data-audit="${i}"]`, (e) => `${e.tagName.toLowerCase()}#${e.id}.${[...e.classList].join(".")} "${e.textContent.trim().slice(0, 30)}"`);
  for (let i = 0; i < n; i++) {
    const el = p.locator(`[data-audit="${i}"]`);
    const first = (await el.ariaSnapshot({ timeout: 5000 })).split("\n")[0];
    // "- button \"Log in\"", or YAML-quoted when the name has a # or the like: "- 'spinbutton \"Workload of front #\"'".
    let line = first.replace(/^- /, "");
    const quoted = /^'(.*)'(:?)$/.exec(line);
    if (quoted) line = quoted[1].replace(/''/g, "'");
    const m = /^(\w+)(?: "((?:[^"\\]|\\.)*)")?/.exec(line);
    const name = m?.[2] ? JSON.parse(`"${m[2]}"`).trim() : "";
    check(m && name !== "", `${where}: ${await describe(i)} has an accessible name (aria snapshot: ${first})`);
    // Its name from a label, aria-label(ledby) or its own text, not a placeholder alone
    // (which goes once something is typed).
    const source = await el.evaluate((e) => {
      if (e.getAttribute("aria-label")?.trim()) return "aria-label";
      if (e.getAttribute("aria-labelledby")) return "aria-labelledby";
      if ([...(e.labels ?? [])].some((l) => l.textContent.trim())) return "label";
      if (!["INPUT", "SELECT", "TEXTAREA"].includes(e.tagName) && e.textContent.trim()) return "text";
      return null;
    });
    check(source !== null, `${where}: ${await describe(i)} is named by a label, aria-label or its text (not "${name}" from a placeholder or title alone)`);
    const found = await p.getByRole(m[1], { name, exact: true }).evaluateAll((es, i) => es.some((e) => e.dataset.audit === String(i)), i);
    check(found, `${where}: getByRole("${m[1]}", { name: "${name}" }) finds ${await describe(i)}`);
    if (await el.isEnabled()) enabled.push(i);
  }
  // Tab from the top of the document: blur, put the focus navigation start at <body>.
  await p.evaluate(() => {
    document.activeElement?.blur();
    window.scrollTo(0, 0);
    document.body.setAttribute("tabindex", "-1");
    document.body.focus();
    document.body.removeAttribute("tabindex");
  });
  const seen = new Map(); // data-audit -> focus indicator
  for (let k = 0; k < n + 10 && seen.size < enabled.length; k++) {
    await p.keyboard.press("Tab");
    const f = await p.evaluate(() => {
      const e = document.activeElement;
      if (!e || e === document.body) return null;
      const cs = window.getComputedStyle(e);
      const outline = cs.outlineStyle !== "none" && parseFloat(cs.outlineWidth) > 0;
      return { i: e.dataset.audit ?? null, what: `${e.tagName.toLowerCase()}#${e.id}`, visible: outline || cs.boxShadow !== "none", style: `outline ${cs.outlineStyle} ${cs.outlineWidth}, box-shadow ${cs.boxShadow}` };
    });
    if (!f) continue;
    check(f.i !== null, `${where}: Tab reached ${f.what}, which is not a control checked for a name`);
    check(f.visible, `${where}: ${await describe(f.i)} shows where the focus is (${f.style})`);
    seen.set(f.i, f.style);
  }
  const missed = enabled.filter((i) => !seen.has(String(i)));
  const named = await Promise.all(missed.map(describe));
  check(missed.length === 0, `${where}: Tab reaches every control (${named.join(", ")} not reached in ${n + 10} presses)`);
  return enabled.length;
}

/** Press key (Tab or Shift+Tab) until sel has the focus, at most max times. */
async function tabTo(p, sel, key = "Tab", max = 60) {
  for (let k = 0; k < max; k++) {
    if (await p.evaluate((sel) => document.activeElement?.matches(sel) ?? false, sel)) return;
    await p.keyboard.press(key);
  }
  check(false, `${sel} reached by ${key} in ${max} presses`);
}

async function login(user, password) {
  await page.fill("#user", user);
  await page.fill("#password", password);
  await page.click("form.login button[type=submit]");
  await page.waitForSelector("header.top .who");
}

/** Pick a schedule on screen k by clicking its point, one that no other point overlaps. */
async function pickOn(k) {
  const target = await page.evaluate((k) => {
    const v = window.vismon;
    const picked = new Set([...document.querySelectorAll("ul.picks li")].map((li) => Number(li.textContent.match(/\d+/)[0])));
    const px = v.ids.map((id) => [id, v.screens.pixelOf(k, id)]);
    for (const [id, p] of px) {
      if (picked.has(id) || !p) continue;
      const alone = px.every(([o, q]) => o === id || !q || Math.hypot(q[0] - p[0], q[1] - p[1]) > 14);
      if (alone) return { id, x: p[0], y: p[1] };
    }
    return null;
  }, k);
  check(target !== null, `screen ${k} has an unpicked schedule that no other point covers`);
  const screen = page.locator(".screen").nth(k);
  await screen.scrollIntoViewIfNeeded();
  const box = await screen.boundingBox();
  await page.mouse.move(box.x + target.x, box.y + target.y);
  // Linked hover: the schedule is named under the screens wherever it is hovered.
  await page.waitForFunction((id) => document.querySelector(".hover")?.textContent?.startsWith(`Schedule ${id}:`), target.id);
  // ... and lit on every screen (those of M too), at its own point there.
  const off = await page.evaluate((id) => [...document.querySelectorAll(".screen")].map((s, j) => {
    const mark = s.querySelector(".lit");
    const p = window.vismon.screens.pixelOf(j, id);
    if (!mark || mark.hidden || !p) return Infinity;
    const m = mark.getBoundingClientRect();
    const b = s.getBoundingClientRect();
    return Math.hypot(m.left + m.width / 2 - (b.left + s.clientLeft + p[0]), m.top + m.height / 2 - (b.top + s.clientTop + p[1]));
  }), target.id);
  check(off.length >= 3 && off.every((d) => d < 1.5), `schedule ${target.id} lit at its point on every screen (off by ${off.map((d) => d.toFixed(1))} px)`);
  // The placement drawing follows the hover: racks, hosts and one mark per container.
  await page.waitForSelector(`#placement-drawing[data-schedule="${target.id}"] svg.placement`);
  await page.mouse.click(box.x + target.x, box.y + target.y);
  await page.waitForFunction((id) => [...document.querySelectorAll("ul.picks li")].some((li) => li.textContent.startsWith(`schedule ${id} `)), target.id);
  return target.id;
}

try {
  await step("an unauthenticated visit shows the login page", async () => {
    await page.goto(`${base}/ui/`);
    await page.waitForSelector("form.login");
    await shot("01-login");
  });

  await step("the login page: every control named and reached by Tab with a visible focus", async () => {
    const n = await keyboardAudit(page, "login");
    check(n === 3, `user, password and Log in (${n} controls)`);
  });

  await step("a wrong password is refused in words", async () => {
    await page.fill("#user", "ada");
    await page.fill("#password", "not-it");
    await page.click("form.login button[type=submit]");
    await page.waitForSelector("text=Wrong user or password.");
  });

  await step("the admin logs in with the keyboard only and sees that no front exists yet", async () => {
    await page.reload();
    await page.waitForSelector("form.login");
    await page.evaluate(() => document.activeElement?.blur());
    await tabTo(page, "#user");
    await page.keyboard.type("ada");
    await page.keyboard.press("Tab");
    check(await page.evaluate(() => document.activeElement?.id === "password"), "Tab goes from the user to the password");
    await page.keyboard.type("admin-pass");
    await page.keyboard.press("Enter");
    await page.waitForSelector("header.top .who");
    check((await page.textContent("header.top .who")).startsWith("ada (admin)"), "logged in as ada, an admin");
    await page.waitForSelector("text=No front yet");
    check(await page.isVisible("#start-run"), "the admin has a start button");
  });

  await step("the admin starts a small front and watches it finish", async () => {
    await page.fill("#population", "24");
    await page.fill("#generations", "12");
    await page.fill("#seed-time", "0");
    await page.click("#start-run");
    await page.waitForSelector("#run-progress");
    await page.waitForSelector('#run-text[data-state="done"]', { timeout: 120000 });
    const value = await page.$eval("#run-progress", (p) => p.value);
    check(value === 1, `the progress bar is full (${value})`);
    const text = await page.textContent("#run-text");
    check(/done: \d+ schedules, hypervolume/.test(text), `the run says what it found: ${text}`);
    await page.waitForFunction(() => (window.vismon?.ids.length ?? 0) >= 3 && document.querySelectorAll(".screen canvas").length >= 3);
    check((await page.locator(".parallel canvas").count()) >= 1, "the parallel-coordinates view is drawn");
    await shot("02-front-done");
  });

  const picks = [];
  await step("three schedules picked, one on each of the P-D, P-C and D-C screens", async () => {
    check((await page.locator(".screen").count()) === 3, "three screens");
    for (const k of [0, 1, 2]) picks.push(await pickOn(k));
    check(new Set(picks).size === 3, `three different schedules: ${picks}`);
    // Off the points, nothing is lit and the hover text says how to hover.
    const box = await page.locator(".screen").first().boundingBox();
    await page.mouse.move(box.x + 3, box.y + 3);
    await page.waitForFunction(() => document.querySelector(".hover")?.textContent?.startsWith("Hover a schedule"));
    check(await page.$$eval(".screen .lit", (ms) => ms.length === 3 && ms.every((m) => m.hidden)), "no schedule lit once the mouse leaves it");
  });

  await step("picks made and unmade with the keyboard only: the schedule-id field and the list of picks", async () => {
    const listed = () => page.$$eval("ul.picks li", (lis) => lis.map((li) => Number(li.textContent.match(/\d+/)[0])));
    const same = (a, b) => [...a].sort((x, y) => x - y).join() === [...b].sort((x, y) => x - y).join();
    const hint = () => page.textContent("#picks-h ~ p.hint");
    const count = (n) => page.waitForFunction((n) => document.querySelectorAll("ul.picks li").length === n, n, { timeout: 5000 })
      .catch(async () => check(false, `${n} picks listed after the key (listed: ${await listed()})`));
    check(same(await listed(), picks), `the three clicked picks are listed (${await listed()})`);
    const [a, b] = picks;
    // The field, reached by Tab from the top of the page: its id and Enter unpick a pick,
    // as a second click on its point does ...
    await page.evaluate(() => { document.activeElement?.blur(); window.scrollTo(0, 0); });
    await tabTo(page, "#pick-id", "Tab", 80);
    await page.keyboard.type(String(a));
    await page.keyboard.press("Enter");
    await count(2);
    check(same(await listed(), picks.filter((p) => p !== a)), `unpicked from the field: ${await listed()}`);
    check((await hint()).startsWith("pick 1 more"), `the count follows (${await hint()})`);
    check(await page.isDisabled("#calibrate"), "Calibrate waits for a third pick");
    check(await page.evaluate(() => document.activeElement?.id === "pick-id"), "the focus stays in the field");
    // ... and pick it again, as a click does.
    await page.keyboard.type(String(a));
    await page.keyboard.press("Enter");
    await count(3);
    check(same(await listed(), picks), `picked from the field: ${await listed()}`);
    check((await hint()) === "3 picked" && (await page.isEnabled("#calibrate")), `the count follows (${await hint()})`);
    // The list: Shift+Tab back from the field to a pick's button, Enter unpicks it.
    await tabTo(page, `ul.picks button[aria-label="unpick schedule ${a}"]`, "Shift+Tab", 10);
    await page.keyboard.press("Enter");
    await count(2);
    check(same(await listed(), picks.filter((p) => p !== a)), `unpicked from the list by Enter: ${await listed()}`);
    const focus = await page.evaluate(() => document.activeElement === document.body ? "body" : (document.activeElement?.getAttribute("aria-label") ?? document.activeElement?.id));
    check(focus !== "body" && focus !== undefined, `the focus stays in the picks after unpicking (${focus})`);
    // ... Space too.
    await tabTo(page, `ul.picks button[aria-label="unpick schedule ${b}"]`, "Shift+Tab", 10);
    await page.keyboard.press("Space");
    await count(1);
    check(same(await listed(), picks.filter((p) => p !== a && p !== b)), `unpicked from the list by Space: ${await listed()}`);
    // Both picked back by id.
    for (const id of [a, b]) {
      await tabTo(page, "#pick-id", "Tab", 10);
      await page.keyboard.type(String(id));
      await page.keyboard.press("Enter");
      await page.waitForFunction((id) => [...document.querySelectorAll("ul.picks li")].some((li) => li.textContent.startsWith(`schedule ${id} `)), id, { timeout: 5000 });
    }
    check(same(await listed(), picks), `the three picks back: ${await listed()}`);
  });

  await step("calibrate shows the weights of both methods", async () => {
    await page.click("#calibrate");
    await page.waitForSelector("table.weights tbody tr >> nth=1");
    const methods = await page.$$eval("table.weights tbody th", (ths) => ths.map((t) => t.textContent));
    check(methods.length === 2 && methods[0].startsWith("thesis") && methods[1].startsWith("inverse"), `both methods: ${methods}`);
    await page.waitForSelector("text=Recommended:");
    // Every column of the weights (residual and regret too) in view at 1280 px, no scroll.
    const fit = await page.$eval(".calibration", (e) => ({ scroll: e.scrollWidth, client: e.clientWidth }));
    check(fit.scroll <= fit.client, `the weights table fits its panel (${fit.scroll} px in ${fit.client} px)`);
    await shot("03-calibrate");
  });

  await step("Calibrate: every control named and reached by Tab with a visible focus", async () => {
    const n = await keyboardAudit(page, "Calibrate");
    check(n >= 15, `the nav, the run form, the picks and the weights' buttons (${n} controls)`);
  });

  let made = "";
  await step("the admin makes weights current", async () => {
    const button = page.locator(".actions button").first();
    made = await button.getAttribute("data-method");
    await button.click();
    await page.waitForSelector(`text=current (${made}), by ada`);
  });

  await step("a front with M as a fourth axis has six screens", async () => {
    await page.fill("#population", "12");
    await page.fill("#generations", "4");
    await page.fill("#seed-time", "0");
    await page.check("#with-migration");
    await page.click("#start-run");
    await page.waitForSelector('#run-text[data-state="done"]', { timeout: 120000 });
    await page.waitForFunction(() => window.vismon?.frontId === 2 && document.querySelectorAll(".screen canvas").length === 6);
    const axes = await page.$$eval(".screen", (els) => els.map((e) => e.dataset.screen));
    check(axes.join() === "P-D,P-C,P-M,D-C,D-M,C-M", `six pairs: ${axes}`);
  });

  await step("the admin cancels a front in progress: it says so, stores nothing, and the page goes on", async () => {
    const before = await apiGet(page, "/api/v1/fronts");
    check(before.status === 200 && before.body.length === 2, `two fronts stored before (${before.body.length})`);
    // Generations enough to run for a minute or more here; cancelled after the first one.
    await page.fill("#population", "40");
    await page.fill("#generations", "2000");
    await page.fill("#seed-time", "0");
    await page.uncheck("#with-migration");
    await page.click("#start-run");
    await page.waitForFunction(() => /generation \d+\/2000/.test(document.querySelector("#run-text")?.textContent ?? ""), undefined, { timeout: 30000 });
    await page.click("#cancel-run");
    await page.waitForSelector('#run-text[data-state="cancelled"]', { timeout: 30000 });
    const text = await page.textContent("#run-text");
    check(/cancelled: cancelled after \d+ generations; no front stored/.test(text), `the run says it was cancelled: ${text}`);
    const value = await page.$eval("#run-progress", (p) => p.value);
    check(value < 1, `the progress bar stopped short (${value})`);
    check((await page.locator("#cancel-run").count()) === 0, "no cancel button once cancelled");
    const runs = await apiGet(page, "/api/v1/front-runs");
    const last = runs.body[runs.body.length - 1];
    check(last.state === "cancelled" && last.front_id === null, `the run is cancelled with no front: ${JSON.stringify(last)}`);
    const after = await apiGet(page, "/api/v1/fronts");
    check(after.body.length === 2, `no front stored from it (${after.body.length} fronts)`);
    check((await page.locator("#front-select option").count()) === 2, "the front list still has two fronts");
    await shot("03b-run-cancelled");
    // The page is usable after: the form is back and a front opens with its screens.
    check(await page.isEnabled("#start-run"), "the start button is back");
    await page.selectOption("#front-select", "1");
    await page.waitForFunction(() => window.vismon?.frontId === 1 && document.querySelectorAll(".screen canvas").length === 3);
    await pickOn(0);
    await page.selectOption("#front-select", "2");
    await page.waitForFunction(() => window.vismon?.frontId === 2 && document.querySelectorAll(".screen canvas").length === 6);
  });

  await step("the Cluster page shows hosts, classes, the new weights and the advice", async () => {
    await page.click("a[href='#/cluster']");
    await page.waitForSelector("table.hosts tbody tr");
    check((await page.locator("table.hosts tbody tr").count()) === 4, "four hosts");
    check((await page.locator(".chip.devil, .chip.contended").count()) >= 1, "devils are shown");
    check((await page.locator("td .chip.turtle").count()) >= 1, "turtles are shown");
    await page.waitForSelector("#cluster-drawing svg.placement");
    check((await page.locator("#cluster-drawing svg.placement polygon").count()) === 4, "four devils drawn");
    check((await page.locator("#cluster-drawing svg.placement line").count()) >= 1, "cross-rack traffic drawn");
    await page.waitForSelector("[data-source='calibrated']");
    await page.waitForSelector("#advice-state");
    await shot("04-cluster");
  });

  await step("the admin dry-runs a repack and sees the moves and P/D/C/M before and after", async () => {
    await page.click("#dry-run");
    await page.waitForSelector("#repack-decision", { timeout: 90000 });
    const decision = await page.getAttribute("#repack-decision", "data-decision");
    check(["no-change", "below-margin", "planned", "deferred", "no-solution"].includes(decision), `a decision: ${decision}`);
    if (decision === "planned") {
      await page.waitForSelector("table.objectives");
      check((await page.locator("table[aria-label='proposed moves'] tbody tr").count()) >= 1, "moves listed");
    }
    await shot("05-repack-dry-run");
  });

  await step("Cluster: every control named and reached by Tab with a visible focus", async () => {
    const n = await keyboardAudit(page, "Cluster");
    check(n >= 6, `the nav, Log out, Dry-run and Apply (${n} controls)`);
  });

  await step("History lists the calibration with who made it, and filters", async () => {
    await page.click("a[href='#/history']");
    await page.waitForSelector("table.history tbody tr");
    const cal = page.locator("tr[data-kind='calibration']");
    check((await cal.count()) === 1, "one calibration");
    check((await cal.first().textContent()).includes("ada"), "made by ada");
    check((await page.locator("tr[data-kind='class']").count()) >= 4, "the devils' class changes");
    await page.fill("#history-filter", "ada");
    await page.waitForFunction(() => document.querySelectorAll("table.history tbody tr").length === 1);
    await page.fill("#history-filter", "no-such-thing");
    await page.waitForSelector("text=No entry matches the filter.");
    await page.fill("#history-filter", "");
    await shot("06-history");
  });

  await step("History: every control named and reached by Tab with a visible focus", async () => {
    const n = await keyboardAudit(page, "History");
    check(n >= 7, `the nav, Log out, the filter and the kinds (${n} controls)`);
  });

  await step("logging out returns to the login page", async () => {
    await page.click("text=Log out");
    await page.waitForSelector("form.login");
  });

  await step("a viewer sees every page and no control that changes state", async () => {
    await login("vic", "viewer-pass");
    await page.waitForFunction(() => window.vismon?.frontId === 2);
    await page.selectOption("#front-select", "1");
    await page.waitForFunction(() => window.vismon?.frontId === 1 && window.vismon.ids.length >= 3);
    check((await page.locator("#start-run").count()) === 0, "no start button");
    check((await page.locator("#cancel-run").count()) === 0, "no cancel button");
    for (const k of [0, 1, 2]) await pickOn(k);
    await page.click("#calibrate"); // a preview: it stores nothing
    await page.waitForSelector("text=Recommended:");
    const buttons = await page.$$eval("button", (bs) => bs.map((b) => b.textContent.trim()));
    const allowed = new Set(["Log out", "Calibrate", "×", "Pick"]); // picks are the viewer's own, unsaved
    check(buttons.every((b) => allowed.has(b)), `only reading controls: ${buttons}`);
    await shot("07-viewer-calibrate");
    await page.click("a[href='#/cluster']");
    await page.waitForSelector("table.hosts tbody tr");
    const clusterButtons = await page.$$eval("button", (bs) => bs.map((b) => b.textContent.trim()));
    check(clusterButtons.join() === "Log out", `only log out on Cluster: ${clusterButtons}`);
    await shot("08-viewer-cluster");
    await page.click("a[href='#/history']");
    await page.waitForSelector("table.history tbody tr");
    check((await page.$$eval("button", (bs) => bs.map((b) => b.textContent.trim()))).join() === "Log out", "only log out on History");
  });

  await step("an expired session returns to the login page", async () => {
    // End the session on the server, as expiry does; the next refresh gets a 401.
    await page.evaluate(async () => {
      const s = JSON.parse(sessionStorage.getItem("clavis.session"));
      await fetch("/api/v1/logout", { method: "POST", headers: { Authorization: `Bearer ${s.token}` } });
    });
    await page.click("a[href='#/cluster']"); // its first request meets the 401
    await page.waitForSelector("text=Your session expired", { timeout: 15000 });
    await shot("09-expired");
  });

  // A large screen: every page again at 2560x1440, in a tab of its own (a new session).
  const big = await browser.newPage({ viewport: { width: 2560, height: 1440 } });
  big.setDefaultTimeout(20000);
  big.on("pageerror", (e) => errors.push(String(e)));
  const noOverflow = async (where) => {
    const o = await horizontalOverflow(big);
    check(o.scrollWidth <= o.vw && o.past.length === 0, `${where}: nothing wider than the ${o.vw} px viewport (document ${o.scrollWidth} px; ${o.past.join(", ")})`);
  };
  const box = async (sel) => big.locator(sel).first().boundingBox();
  /** A placement drawing grows with its panel up to twice its own size, inside the panel. */
  const drawingFills = async (holderSel) => {
    const d = await big.$eval(`${holderSel} svg.placement`, (svg) => {
      const r = svg.getBoundingClientRect();
      const h = svg.parentElement.getBoundingClientRect();
      const cs = window.getComputedStyle(svg.parentElement);
      const room = h.width - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight) - parseFloat(cs.borderLeftWidth) - parseFloat(cs.borderRightWidth);
      return { natural: svg.viewBox.baseVal.width, w: r.width, h: r.height, left: r.left, right: r.right, hl: h.left, hr: h.right, room };
    });
    const scale = d.w / d.natural;
    const want = Math.min(2, d.room / d.natural);
    check(scale >= want - 0.02 && d.left >= d.hl && d.right <= d.hr + 0.5 && d.h <= 0.6 * 1440,
      `${holderSel}'s drawing uses its panel: ${d.w.toFixed(0)} x ${d.h.toFixed(0)} px, ${scale.toFixed(2)} times its size (want ${want.toFixed(2)}), in ${d.room.toFixed(0)} px`);
  };

  await step("on a 2560x1440 screen Calibrate's three screens and the drawing fill the width", async () => {
    await big.goto(`${base}/ui/`);
    await big.fill("#user", "ada");
    await big.fill("#password", "admin-pass");
    await big.click("form.login button[type=submit]");
    await big.waitForFunction(() => window.vismon?.frontId === 2);
    await big.selectOption("#front-select", "1");
    await big.waitForFunction(() => window.vismon?.frontId === 1 && document.querySelectorAll(".screen canvas").length === 3);
    // Hover a schedule so that the placement drawing is drawn.
    const s0 = await box(".screen");
    const p = await big.evaluate(() => window.vismon.screens.pixelOf(0, window.vismon.ids[0]));
    await big.mouse.move(s0.x + p[0], s0.y + p[1]);
    await big.waitForSelector("#placement-drawing svg.placement");
    await noOverflow("Calibrate");
    const panel = await box(".screens-box");
    const screens = await big.$$eval(".screen", (els) => els.map((e) => { const r = e.getBoundingClientRect(); return { x: r.left, y: r.top, w: r.width, h: r.height }; }));
    check(screens.length === 3 && screens.every((r) => r.y === screens[0].y), `three screens side by side: ${JSON.stringify(screens)}`);
    const row = screens[2].x + screens[2].w - screens[0].x;
    check(row > 0.9 * (panel.width - 30), `the screens span their panel (${row.toFixed(0)} of ${panel.width.toFixed(0)} px)`);
    check(screens.every((r) => r.w >= 500 && r.h >= 0.25 * 1440 && r.h <= 0.6 * 1440 && r.y + r.h <= 1440), `each screen large and wholly on screen: ${JSON.stringify(screens)}`);
    await drawingFills("#placement-drawing");
    await shotOf(big, "10-large-calibrate");
    // With M: six screens in two rows of three.
    await big.selectOption("#front-select", "2");
    await big.waitForFunction(() => window.vismon?.frontId === 2 && document.querySelectorAll(".screen canvas").length === 6);
    const rows = await big.$$eval(".screen", (els) => els.map((e) => Math.round(e.getBoundingClientRect().top)));
    check(new Set(rows).size === 2 && rows.filter((y) => y === rows[0]).length === 3, `six screens in two rows of three (tops ${rows})`);
    await noOverflow("Calibrate with M");
  });

  await step("on a 2560x1440 screen the Cluster page and its drawing fill the width", async () => {
    await big.click("a[href='#/cluster']");
    await big.waitForSelector("table.hosts tbody tr");
    await big.waitForSelector("#cluster-drawing svg.placement");
    await noOverflow("Cluster");
    await drawingFills("#cluster-drawing");
    const hosts = await box("table.hosts");
    check(hosts.width >= 0.5 * 2560, `the hosts table is wide (${hosts.width.toFixed(0)} px)`);
    await shotOf(big, "11-large-cluster");
  });

  await step("on a 2560x1440 screen History fills the width", async () => {
    await big.click("a[href='#/history']");
    await big.waitForSelector("table.history tbody tr");
    await noOverflow("History");
    const table = await box("table.history");
    check(table.width >= 0.9 * (2560 - 40), `the history table spans the page (${table.width.toFixed(0)} px)`);
    await shotOf(big, "12-large-history");
  });
  await big.close();

  check(errors.length === 0, `no script errors in the page: ${errors.join("; ")}`);
  console.log(`${passed} passed, 0 failed`);
} catch (e) {
  await shot("failure").catch(() => undefined);
  for (const p of browser.contexts().flatMap((c) => c.pages()).filter((p) => p !== page)) await shotOf(p, "failure-large").catch(() => undefined);
  console.error(`not ok ${passed + 1} - ${e.stack ?? e}`);
  console.log(`${passed} passed, 1 failed`);
  process.exitCode = 1;
} finally {
  await browser.close();
}
