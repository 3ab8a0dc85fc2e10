import js from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["dist/", "node_modules/", "src/api/schema.ts"] },
  js.configs.recommended,
  ...tseslint.configs.strict,
  // Tests index arrays they have just built; the assertion says "this exists" plainly.
  { files: ["tests/**/*.ts"], rules: { "@typescript-eslint/no-non-null-assertion": "off" } },
  {
    files: ["e2e/**/*.mjs"],
    // Node for the script; the page functions it passes to evaluate() run in the browser.
    languageOptions: {
      globals: Object.fromEntries(
        ["process", "console", "window", "document", "sessionStorage", "fetch", "requestAnimationFrame", "performance", "MouseEvent"].map((g) => [g, "readonly"]),
      ),
    },
  },
);
