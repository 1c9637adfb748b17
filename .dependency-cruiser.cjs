// The layers of docs/design.md §1, checked on every import of src/ (type-only imports too) by
// `npm run lint` (`depcruise src`): data flows one way, HTTP → hub/cas → (format, stores), and a
// module imports nothing from a layer above its own. Each rule names the table row it enforces.
// Bare package names (npm libraries and node: built-ins) are not castor's and not checked.
const layer = (folder) => `^src/${folder}/`;
const castor = (...folders) => folders.map(layer).join("|");

/** A rule: modules of `from` import nothing from `notTo` (nor anything matching `notPath`). */
const forbid = (name, comment, from, notTo) => ({ name, comment, severity: "error", from: { path: from }, to: { path: notTo } });

module.exports = {
  forbidden: [
    {
      name: "no-circular",
      comment: "No import cycle anywhere in src: a cycle makes module order matter and layers meaningless.",
      severity: "error",
      from: { path: "^src/" },
      to: { circular: true },
    },
    forbid(
      "format-is-pure",
      "src/format: pure codecs, no I/O; imports only hashing and compression libraries, nothing of castor outside src/format.",
      layer("format"),
      "^src/(?!format/)",
    ),
    forbid(
      "wire-is-declarations",
      "src/wire: the Hub API's JSON shapes (schemas with their types), shared by the server, src/client and web/; imports nothing of castor.",
      layer("wire"),
      "^src/(?!wire/)",
    ),
    forbid(
      "helpers-stand-alone",
      "src/{concurrency,duration,writable-drain}.ts: small tools any layer (castor's client included) may import; they import nothing of castor.",
      "^src/(concurrency|duration|writable-drain)\\.ts$",
      "^src/",
    ),
    forbid(
      "config-at-the-bottom",
      "src/config.ts: one typed config object; imports nothing above it (its defaults live in it) but the settings' readers.",
      "^src/config\\.ts$",
      "^src/(?!format/|duration\\.ts$|settings\\.ts$)",
    ),
    forbid("settings-read-text", "src/settings.ts: the settings' names and how their text reads; imports only src/duration.ts.", "^src/settings\\.ts$", "^src/(?!duration\\.ts$)"),
    forbid(
      "storage-below-services",
      "src/storage: the blob seam; imports format and config only.",
      layer("storage"),
      "^src/(?!storage/|format/|config\\.ts$|duration\\.ts$)",
    ),
    forbid(
      "metadata-below-services",
      "src/metadata: the metadata seam; imports format and config only.",
      layer("metadata"),
      "^src/(?!metadata/|format/|config\\.ts$|duration\\.ts$)",
    ),
    forbid(
      "auth-below-services",
      "src/auth: tokens, keys and signed URLs; imports format, config and the store seams' types.",
      layer("auth"),
      castor("cas", "hub", "http", "ops", "cli", "client", "cluster") + "|^src/server\\.ts$",
    ),
    forbid(
      "cas-below-transports",
      "src/cas: the CAS service; imports format, auth and the two store interfaces, never the hub, a transport or the operations.",
      layer("cas"),
      castor("hub", "http", "ops", "cli", "client", "cluster") + "|^src/server\\.ts$",
    ),
    forbid(
      "hub-below-transports",
      "src/hub: the hub's application layer, called by every transport; imports format, auth, cas and the stores, never a transport (a mirror's source reaches it through the hub's own interface, mirrored.ts).",
      layer("hub"),
      castor("http", "ops", "cli", "client", "cluster", "mirror", "upstream") + "|^src/server\\.ts$",
    ),
    forbid(
      "git-is-a-protocol",
      "src/git: git's protocol engines over an object source, and the one adapter (hub-source.ts) that is the hub seen as git; never a store, the CAS, a transport or the operations.",
      layer("git"),
      castor("storage", "metadata", "cas", "auth", "http", "ops", "cli", "client", "cluster") + "|^src/server\\.ts$",
    ),
    forbid(
      "git-engines-know-no-hub",
      "src/git's engines speak git over the object-source interface (source.ts) only; hub-source.ts alone calls the hub's services.",
      "^src/git/(?!hub-source\\.ts$)",
      layer("hub"),
    ),
    forbid(
      "upstream-asks-another-hub",
      "src/upstream: the upstream hub a mirror asks, through castor's own client; imports the client, format, the wire shapes and the stand-alone helpers only.",
      layer("upstream"),
      "^src/(?!upstream/|client/|format/|wire/|concurrency\\.ts$)",
    ),
    forbid(
      "mirror-behind-the-services",
      "src/mirror: the mirror of an upstream hub, a source behind the hub's services and the CAS; never imports a transport, the operations or the composition root.",
      layer("mirror"),
      castor("http", "ops", "cli", "cluster") + "|^src/server\\.ts$",
    ),
    forbid(
      "mirror-built-by-the-root",
      "Only the composition root and the CLI build the mirror; the services see it through hub/mirrored.ts, the CAS and the routes through their own dependencies.",
      "^src/(?!mirror/|cli/|server\\.ts$)",
      layer("mirror"),
    ),
    forbid("upstream-for-the-mirror", "Only the mirror (and the CLI's mirror commands) asks the upstream hub.", "^src/(?!upstream/|mirror/|cli/)", layer("upstream")),
    forbid(
      "ops-below-transports",
      "src/ops: operations on whole stores (gc, fsck, backup, migration); called by the CLI and the composition root, never by HTTP routes.",
      layer("ops"),
      castor("http", "cli", "client", "cluster") + "|^src/server\\.ts$",
    ),
    forbid(
      "http-is-a-transport",
      "src/http: fastify plugins that parse, call a service and render; built by the composition root (src/server.ts), never importing it, the CLI or the operations.",
      layer("http"),
      castor("cli", "client", "cluster", "ops") + "|^src/server\\.ts$",
    ),
    forbid(
      "hub-routes-call-the-hub",
      "src/http/hub: the Hub API's routes call src/hub's services; storage, metadata, leases and castor's client are the services' business.",
      layer("http/hub"),
      castor("storage", "metadata", "client", "ops") + "|^src/cas/leases\\.ts$",
    ),
    forbid(
      "client-stands-alone",
      "src/client: castor's own client (castor/client) works against any Xet server: it imports format, the wire shapes and the stand-alone helpers only.",
      layer("client"),
      "^src/(?!client/|format/|wire/|concurrency\\.ts$)",
    ),
    forbid(
      "cli-and-cluster-are-wiring",
      "Nothing but the entry points imports the CLI or the cluster.",
      "^src/(?!cli/|cluster/|server\\.ts$)",
      castor("cli", "cluster"),
    ),
    forbid("server-is-the-root", "src/server.ts composes everything; only the CLI and the cluster start it.", "^src/(?!cli/|cluster/)", "^src/server\\.ts$"),
  ],
  options: {
    // TypeScript's compiler API is not available from TypeScript 7 on: swc parses the sources.
    parser: "swc",
    // Type-only imports count: they tie the layers together as much as value imports do.
    tsPreCompilationDeps: true,
    doNotFollow: { path: "node_modules" },
    exclude: { path: "\\.d\\.ts$" },
    // Sources import each other as `./x.js` (NodeNext), which names `./x.ts` here.
    tsConfig: { fileName: "tsconfig.json" },
    enhancedResolveOptions: { extensions: [".ts", ".js"] },
  },
};
