// Drives wisp's console in headless Chromium for crates/wisp/tests/console.rs: sign in
// with the token, see the service, follow its revision, and watch the replica chart move
// (without reloading) once the test puts load on the service. Prints one JSON result line.
import { chromium } from "playwright-core";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const { WISP_CONSOLE, WISP_TOKEN, WISP_SERVICE, WISP_SCREENSHOT, WISP_REPLICAS } = process.env;
const want = Number(WISP_REPLICAS || "2");
const profile = mkdtempSync(join(tmpdir(), "wisp-console-"));
const result = { errors: [], outside: [], steps: [], replicas: null, reloads: 0 };
const loopback = new Set(["127.0.0.1", "localhost", "[::1]"]);

function step(s) {
  result.steps.push(s);
  process.stderr.write(`console test: ${s}\n`);
}

let context;
try {
  context = await chromium.launchPersistentContext(profile, {
    executablePath: "/usr/bin/chromium",
    headless: true,
    viewport: { width: 1280, height: 900 },
    args: [
      "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
    ],
  });
  const page = context.pages()[0] || (await context.newPage());
  page.on("console", (m) => { if (m.type() === "error") result.errors.push(m.text()); });
  page.on("pageerror", (e) => result.errors.push(String(e)));
  page.on("requestfailed", (r) => result.errors.push(`request failed: ${r.url()} ${r.failure()?.errorText}`));
  page.on("request", (r) => {
    const u = new URL(r.url());
    if (u.protocol !== "data:" && !loopback.has(u.hostname)) result.outside.push(r.url());
  });
  page.on("framenavigated", (f) => { if (f === page.mainFrame()) result.reloads += 1; });

  await page.goto(`${WISP_CONSOLE}/`);
  step("login page");
  await page.fill('input[name="token"]', WISP_TOKEN);
  await Promise.all([page.waitForURL(`${WISP_CONSOLE}/`), page.click('button[type="submit"]')]);
  await page.getByRole("link", { name: WISP_SERVICE, exact: true }).waitFor();
  step("service list");
  await Promise.all([page.waitForURL(/\/services\//), page.click(`a.svc:text-is("${WISP_SERVICE}")`)]);
  step("service page");
  await Promise.all([page.waitForURL(/revision=/), page.locator("a.rev").first().click()]);
  await page.locator("#chart-replicas").waitFor();
  step("revision followed");
  const navigations = result.reloads;
  const last = () => page.$eval('#chart-replicas g[data-series="actual"]', (g) => Number(g.dataset.last || "0"));
  result.replicas = { before: await last() };

  // The test applies load once it reads this line.
  console.log("READY");
  const deadline = Date.now() + 120_000;
  while (Date.now() < deadline) {
    const n = await last();
    result.replicas.after = n;
    if (n >= want) break;
    await page.waitForTimeout(1000);
  }
  result.reloads -= navigations;
  step(`replica chart at ${result.replicas.after}`);
  // One more refresh so the screenshot shows the latest section contents.
  await page.waitForTimeout(2500);
  await page.screenshot({ path: WISP_SCREENSHOT, fullPage: true });
  step("screenshot");
} catch (e) {
  result.errors.push(`driver: ${e && e.stack ? e.stack : e}`);
} finally {
  if (context) await context.close();
  rmSync(profile, { recursive: true, force: true });
}
console.log("RESULT " + JSON.stringify(result));
