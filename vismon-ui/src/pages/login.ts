import type { Client } from "../api/client";
import { ApiError } from "../api/client";
import { h, swap } from "../dom";
import type { Session } from "../session";

export function loginPage(api: Client, expired: boolean, done: (s: Session) => void): HTMLElement {
  const user = h("input", { id: "user", name: "user", autocomplete: "username", required: true });
  const password = h("input", {
    id: "password",
    name: "password",
    type: "password",
    autocomplete: "current-password",
    required: true,
  });
  const message = h("div", { class: "message", role: "alert" });
  if (expired) swap(message, h("p", { class: "state error" }, "Your session expired; log in again."));
  const submit = h("button", { type: "submit" }, "Log in");
  const form = h(
    "form",
    { class: "login", "aria-label": "log in" },
    h("h1", {}, "Clavis — log in"),
    h("label", { for: "user" }, "User"),
    user,
    h("label", { for: "password" }, "Password"),
    password,
    submit,
    message,
  );
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    submit.disabled = true;
    swap(message, h("p", { class: "state loading", role: "status" }, "Logging in…"));
    api
      .post("/api/v1/login", { user: user.value, password: password.value })
      .then((r) => done({ token: r.token, role: r.role, expires: r.expires, user: user.value }))
      .catch((err: unknown) => {
        const text =
          err instanceof ApiError && err.status === 401
            ? "Wrong user or password."
            : `Could not log in: ${err instanceof Error ? err.message : String(err)}`;
        swap(message, h("p", { class: "state error" }, text));
      })
      .finally(() => {
        submit.disabled = false;
      });
  });
  return h("main", { class: "login-page" }, form);
}
