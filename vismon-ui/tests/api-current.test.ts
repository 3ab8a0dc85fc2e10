// src/api/schema.ts must be what openapi-typescript makes of the committed openapi.json
// (whose match with clavisd is checked by solver/tests/service/test_ui_openapi.py).
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import openapiTS, { astToString } from "openapi-typescript";
import { expect, it } from "vitest";

it("the typed client is generated from the committed OpenAPI document", async () => {
  const root = fileURLToPath(new URL("..", import.meta.url));
  const doc = JSON.parse(readFileSync(`${root}/openapi.json`, "utf8")) as Parameters<typeof openapiTS>[0];
  const ast = await openapiTS(doc);
  const committed = readFileSync(`${root}/src/api/schema.ts`, "utf8");
  // The CLI adds a banner; compare the generated declarations.
  const body = (s: string) => s.slice(s.indexOf("export interface paths"));
  expect(body(committed).trim(), "run vismon-ui/scripts/gen-api.sh").toBe(body(astToString(ast)).trim());
}, 30000);
