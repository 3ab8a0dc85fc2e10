import { defineConfig } from "vitest/config";

// Built into dist/ and served by clavisd at /ui/ (server.ui_dir); `npm run dev` proxies the
// API to a clavisd on the default port.
export default defineConfig({
  base: "/ui/",
  build: { outDir: "dist", emptyOutDir: true, chunkSizeWarningLimit: 1500 },
  server: { proxy: { "/api": "http://127.0.0.1:7780" } },
  test: { include: ["tests/**/*.test.ts"], environment: "node" },
});
