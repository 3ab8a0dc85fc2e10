// A few DOM builders: the pages are plain TypeScript, no framework.
type Attrs = Record<string, string | number | boolean | null | undefined | EventListener>;
type Child = Node | string | null | undefined | false;

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Attrs = {},
  ...children: (Child | Child[])[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (typeof v === "function") el.addEventListener(k.replace(/^on/, ""), v);
    else if (v === true) el.setAttribute(k, "");
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(typeof c === "string" ? document.createTextNode(c) : c);
  }
  return el;
}

/** The explicit states every panel shows: loading, empty (with why), error (with what). */
export function loading(what: string): HTMLElement {
  return h("p", { class: "state loading", role: "status" }, `Loading ${what}…`);
}

export function empty(why: string): HTMLElement {
  return h("p", { class: "state empty", role: "status" }, why);
}

export function failure(what: string, err: unknown): HTMLElement {
  const msg = err instanceof Error ? err.message : String(err);
  return h("p", { class: "state error", role: "alert" }, `Could not ${what}: ${msg}`);
}

export function swap(el: HTMLElement, ...children: Child[]): void {
  el.replaceChildren(...children.filter((c): c is Node | string => !!c));
}
