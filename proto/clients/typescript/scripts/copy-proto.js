// copy-proto.js: cdc's .proto files (the repository's proto/cdc/v1/) copied into this package's
// proto/ before it is compiled or packed: the client loads them from there at startup, so that a
// package installed from `npm pack`'s tarball holds the schema it was built with. The repository's
// LICENSE comes along too: npm packs no symlink, and the tarball must carry the license text.
const fs = require("node:fs");
const path = require("node:path");

const from = path.join(__dirname, "..", "..", "..", "cdc", "v1");
const to = path.join(__dirname, "..", "proto", "cdc", "v1");
if (!fs.existsSync(from)) {
  console.error(`copy-proto: ${from} not found: build the package in cdc's repository`);
  process.exit(1);
}
fs.rmSync(path.join(__dirname, "..", "proto"), { recursive: true, force: true });
fs.mkdirSync(to, { recursive: true });
for (const f of fs.readdirSync(from).filter((f) => f.endsWith(".proto"))) fs.copyFileSync(path.join(from, f), path.join(to, f));
fs.copyFileSync(path.join(__dirname, "..", "..", "..", "..", "LICENSE"), path.join(__dirname, "..", "LICENSE"));
