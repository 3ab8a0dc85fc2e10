// A typed client over the OpenAPI document clavisd publishes: `paths` is generated from it
// (scripts/gen-api.sh → src/api/schema.ts; a test checks both are current), so a path,
// its body and its answer are checked by tsc against what clavisd really serves.
import type { paths } from "./schema";

type Method = "get" | "post";
type Json<R> = R extends { content: { "application/json": infer T } } ? T : never;
type Op<P extends keyof paths, M extends Method> = NonNullable<paths[P][M]>;
export type Ok<P extends keyof paths, M extends Method> =
  Op<P, M> extends { responses: { 200: infer R } }
    ? Json<R>
    : Op<P, M> extends { responses: { 202: infer R } }
      ? Json<R>
      : never;
type BodyOf<O> = O extends { requestBody: { content: { "application/json": infer B } } }
  ? B
  : O extends { requestBody?: { content: { "application/json": infer B } } }
    ? B
    : undefined;
export type Body<P extends keyof paths, M extends Method> = BodyOf<Op<P, M>>;
type With<M extends Method> = {
  [P in keyof paths]: Op<P, M> extends { responses: unknown } ? P : never;
}[keyof paths];
export type GetPath = With<"get">;
export type PostPath = With<"post">;
export type Params = Record<string, string | number>;

/** An answer other than 2xx: the status and clavisd's `detail`. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly detail: string,
  ) {
    super(`${status}: ${detail}`);
  }
}

export function fillPath(template: string, params: Params = {}): string {
  return template.replace(/\{(\w+)\}/g, (_, name: string) => {
    const v = params[name];
    if (v === undefined) throw new Error(`path ${template}: no value for ${name}`);
    return encodeURIComponent(String(v));
  });
}

export interface ClientOptions {
  base?: string;
  token: () => string | null;
  /** Called on a 401: the session expired or was never valid. */
  onUnauthenticated: () => void;
  fetch?: typeof fetch;
}

async function detailOf(r: Response): Promise<string> {
  const text = await r.text();
  try {
    const doc = JSON.parse(text) as { detail?: unknown };
    if (typeof doc.detail === "string") return doc.detail;
    if (doc.detail !== undefined) return JSON.stringify(doc.detail);
  } catch {
    // not JSON: the text itself says what happened
  }
  return text || r.statusText;
}

export class Client {
  private readonly base: string;
  private readonly f: typeof fetch;

  constructor(private readonly opts: ClientOptions) {
    this.base = opts.base ?? "";
    this.f = opts.fetch ?? ((...a) => fetch(...a));
  }

  headers(json: boolean): Record<string, string> {
    const h: Record<string, string> = {};
    const t = this.opts.token();
    if (t) h.Authorization = `Bearer ${t}`;
    if (json) h["Content-Type"] = "application/json";
    return h;
  }

  async raw(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<Response> {
    const r = await this.f(this.base + path, {
      method,
      headers: this.headers(body !== undefined),
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
    });
    // A 401 with a token means the session ended; without one (a failed login) it does not.
    if (r.status === 401 && this.opts.token()) this.opts.onUnauthenticated();
    if (!r.ok) throw new ApiError(r.status, await detailOf(r));
    return r;
  }

  async get<P extends GetPath>(path: P, params?: Params): Promise<Ok<P, "get">> {
    const r = await this.raw("GET", fillPath(path, params));
    return (await r.json()) as Ok<P, "get">;
  }

  async post<P extends PostPath>(
    path: P,
    body: Body<P, "post">,
    params?: Params,
  ): Promise<Ok<P, "post">> {
    const r = await this.raw("POST", fillPath(path, params), body ?? undefined);
    return (await r.json()) as Ok<P, "post">;
  }
}
