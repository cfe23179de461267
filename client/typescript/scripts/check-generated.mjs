// Fails when src/schema.ts is not what openapi-typescript generates from
// handlers/openapi.json now (run `npm run generate` and commit the result).
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const dir = mkdtempSync(join(tmpdir(), "taskpilots-schema-"));
try {
  const out = join(dir, "schema.ts");
  execFileSync(join(root, "node_modules", ".bin", "openapi-typescript"),
    [join(root, "..", "..", "handlers", "openapi.json"), "--default-non-nullable", "false", "-o", out], { stdio: ["ignore", "ignore", "inherit"] });
  if (readFileSync(out, "utf8") !== readFileSync(join(root, "src", "schema.ts"), "utf8")) {
    console.error("client/typescript/src/schema.ts is stale: run `npm run generate` in client/typescript and commit it");
    process.exit(1);
  }
  console.log("client/typescript/src/schema.ts is fresh");
} finally {
  rmSync(dir, { recursive: true, force: true });
}
