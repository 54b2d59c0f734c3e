// The console's first paint for bench/src/bin/observe_cost.rs: signs in, then loads the
// service list WISP_LOADS times in headless Chromium and reports, per load, the browser's
// first-contentful-paint and its DOMContentLoaded (by then all WISP_ROWS server-rendered rows
// are parsed; the script checks they are there), in ms from navigation start. Prints one
// `RESULT {json}` line.
import { chromium } from "playwright-core";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const { WISP_CONSOLE, WISP_TOKEN } = process.env;
const rows = Number(process.env.WISP_ROWS || "0");
const loads = Number(process.env.WISP_LOADS || "5");
const profile = mkdtempSync(join(tmpdir(), "wisp-paint-"));
const result = { loads: [] };
let context;
try {
  context = await chromium.launchPersistentContext(profile, {
    executablePath: "/usr/bin/chromium",
    headless: true,
    args: [
      "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
    ],
  });
  const page = context.pages()[0] || (await context.newPage());
  await page.goto(`${WISP_CONSOLE}/login`);
  await page.fill('input[name="token"]', WISP_TOKEN);
  await Promise.all([page.waitForURL(`${WISP_CONSOLE}/`), page.click('button[type="submit"]')]);
  for (let i = 0; i < loads; i++) {
    const resp = await page.goto(`${WISP_CONSOLE}/`, { waitUntil: "load" });
    const htmlBytes = (await resp.body()).length;
    await page.waitForFunction((n) => document.querySelectorAll("#services tr").length >= n, rows);
    const m = await page.evaluate(() => {
      const paint = performance.getEntriesByName("first-contentful-paint")[0];
      const nav = performance.getEntriesByType("navigation")[0];
      return { fcp: paint ? paint.startTime : null, dcl: nav ? nav.domContentLoadedEventEnd : null };
    });
    // The rows are server-rendered, so every row is parsed by DOMContentLoaded (the
    // waitForFunction above checks they are all there).
    result.loads.push({ fcp: m.fcp, dcl: m.dcl, htmlBytes });
  }
} catch (e) {
  result.error = String(e && e.stack ? e.stack : e);
} finally {
  if (context) await context.close();
  rmSync(profile, { recursive: true, force: true });
}
console.log("RESULT " + JSON.stringify(result));
