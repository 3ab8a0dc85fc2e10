import { describe, expect, it } from "vitest";
import { ApiError, Client, fillPath } from "../src/api/client";

function fake(status: number, body: unknown): typeof fetch {
  return (async () => new Response(JSON.stringify(body), { status })) as typeof fetch;
}

describe("client", () => {
  it("fills path parameters and refuses a missing one", () => {
    expect(fillPath("/api/v1/fronts/{front_id}/picks", { front_id: 3 })).toBe("/api/v1/fronts/3/picks");
    expect(() => fillPath("/api/v1/fronts/{front_id}")).toThrow("no value for front_id");
  });

  it("turns a refusal into an ApiError with clavisd's detail", async () => {
    const c = new Client({ token: () => "t", onUnauthenticated: () => undefined, fetch: fake(409, { detail: "front run 1 is in progress" }) });
    await expect(c.get("/api/v1/front-runs")).rejects.toEqual(new ApiError(409, "front run 1 is in progress"));
  });

  it("sends an expired session back to login, but not a failed login", async () => {
    let sent = 0;
    const expired = new Client({ token: () => "old", onUnauthenticated: () => sent++, fetch: fake(401, { detail: "unauthenticated" }) });
    await expect(expired.get("/api/v1/hosts")).rejects.toBeInstanceOf(ApiError);
    expect(sent).toBe(1);
    const login = new Client({ token: () => null, onUnauthenticated: () => sent++, fetch: fake(401, { detail: "wrong" }) });
    await expect(login.post("/api/v1/login", { user: "a", password: "b" })).rejects.toBeInstanceOf(ApiError);
    expect(sent).toBe(1);
  });
});
