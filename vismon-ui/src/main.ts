// vismon: the Clavis admin's web UI (issue 16). Hash routes: #/login, #/calibrate,
// #/cluster, #/history.
import "./style.css";
import { Client } from "./api/client";
import { h } from "./dom";
import * as session from "./session";
import { loginPage } from "./pages/login";
import { calibratePage } from "./pages/calibrate";
import { clusterPage } from "./pages/cluster";
import { historyPage } from "./pages/history";

export interface Ctx {
  api: Client;
  session: session.Session;
  /** Stops timers and streams of the page being left. */
  onLeave: (f: () => void) => void;
}

const root = document.getElementById("app") as HTMLElement;
let leaving: (() => void)[] = [];

const api = new Client({
  token: () => session.load()?.token ?? null,
  onUnauthenticated: () => {
    session.clear();
    go("#/login?expired=1");
  },
});

function go(hash: string): void {
  if (location.hash === hash) render();
  else location.hash = hash;
}

function nav(s: session.Session, active: string): HTMLElement {
  const link = (href: string, label: string) =>
    h("a", { href, "aria-current": active === href ? "page" : null }, label);
  return h(
    "header",
    { class: "top" },
    h("strong", { class: "brand" }, "Clavis"),
    h("nav", { "aria-label": "pages" }, link("#/calibrate", "Calibrate"), link("#/cluster", "Cluster"), link("#/history", "History")),
    h("span", { class: "who", "data-role": s.role }, `${s.user} (${s.role})`),
    h(
      "button",
      {
        type: "button",
        onclick: () => {
          void api.raw("POST", "/api/v1/logout").catch(() => undefined);
          session.clear();
          go("#/login");
        },
      },
      "Log out",
    ),
  );
}

function render(): void {
  for (const f of leaving) f();
  leaving = [];
  const [path, query = ""] = location.hash.replace(/^#/, "").split("?");
  const s = session.load();
  if (!s || path === "/login") {
    if (s && path === "/login") session.clear();
    root.replaceChildren(
      loginPage(api, new URLSearchParams(query).has("expired"), (ns) => {
        session.save(ns);
        go("#/calibrate");
      }),
    );
    return;
  }
  const ctx: Ctx = { api, session: s, onLeave: (f) => leaving.push(f) };
  const route = path === "/cluster" ? "#/cluster" : path === "/history" ? "#/history" : "#/calibrate";
  const main = h("main", { id: "main" });
  root.replaceChildren(nav(s, route), main);
  if (route === "#/cluster") clusterPage(ctx, main);
  else if (route === "#/history") historyPage(ctx, main);
  else calibratePage(ctx, main);
}

window.addEventListener("hashchange", render);
render();
