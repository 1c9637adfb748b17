/** `castor token create|list|revoke`: hub tokens, the credentials clients trade for CAS tokens. */
import { loadAdminConfig } from "./stores.js";
import { parseExpires } from "../hub/expires.js";
import { formatRepoRef, parseRepoRef } from "../hub/names.js";
import { OPERATOR } from "../hub/access.js";
import { withHub } from "../hub/open.js";
import { hubTokenState } from "../hub/tokens.js";
import type { Access, HubToken, Repo } from "../metadata/store.js";
import {
  CONFIG_FLAGS_HELP,
  EXIT_FAILURE,
  EXIT_OK,
  UsageError,
  expectPositionals,
  formatTable,
  formatTime,
  parseCommandLine,
  runCommand,
  runSubcommand,
} from "./args.js";

const USAGE = `Usage: castor token <create|list|revoke> …

  castor token create [--user NAME] (--repo TYPE:NS/NAME[,…] | --namespace NS[,…] | --all-repos)
                      --access read|write [--expires D]
  castor token list
  castor token revoke ID

Run 'castor token create --help' for details.
`;

const CREATE_USAGE = `Usage: castor token create [--user NAME] (--repo TYPE:NS/NAME[,…] | --namespace NS[,…] | --all-repos)
                           --access read|write [--expires D]

Creates a hub token and prints it once, alone on the last line of stdout (everything else
goes to stderr). Only its SHA-256 is stored: it cannot be shown again.

  --user NAME           the user the token acts for: what 'hf auth whoami' shows, the author
                        of its commits, and the namespace of repositories it creates without
                        naming one (give --namespace NAME too to let it create them)
  --repo TYPE:NS/NAME   a repository the token covers, e.g. model:alice/bert; repeat the
                        flag or separate references with commas for several
  --namespace NS        every repository of namespace NS, including ones created later; a
                        write token may create repositories there (hf repo create NS/NAME)
  --all-repos           cover every repository, including ones created later (a write token
                        may create repositories in any namespace)
  --access read|write   read: CAS read tokens only; write: read and write tokens
  --expires D           a duration (30d, 12h, 45m, 3600s) or an ISO date (2030-01-31 or
                        2030-01-31T12:00:00Z); default: never expires

${CONFIG_FLAGS_HELP}
`;

const LIST_USAGE = `Usage: castor token list [--data-dir DIR]

Prints a table of hub tokens (id, access, repositories, status, expiry, creation time).
Secrets are never shown: they are not stored.

${CONFIG_FLAGS_HELP}
`;

const REVOKE_USAGE = `Usage: castor token revoke ID [--data-dir DIR]

Revokes the hub token with that id (as shown by 'castor token list'). The hub refuses it
from then on; CAS tokens already issued with it stay valid until their own expiry.

${CONFIG_FLAGS_HELP}
`;

export function run(argv: string[]): Promise<number> {
  return runSubcommand("token", USAGE, { create, list, revoke }, argv);
}

function create(argv: string[]): Promise<number> {
  return runCommand("token create", async () => {
    const args = parseCommandLine(argv, {
      repo: { type: "string", multiple: true },
      namespace: { type: "string", multiple: true },
      user: { type: "string" },
      "all-repos": { type: "boolean" },
      access: { type: "string" },
      expires: { type: "string" },
    });
    if (args.help) return help(CREATE_USAGE);
    expectPositionals(args.positionals, []);
    const { values } = args;

    const refs = (values.repo ?? []).flatMap((list) => list.split(",")).map((ref) => ref.trim());
    const namespaces = (values.namespace ?? []).flatMap((list) => list.split(",")).map((ns) => ns.trim());
    const allRepos = values["all-repos"] === true;
    if (allRepos === (values.repo !== undefined || values.namespace !== undefined)) {
      throw new UsageError("give --repo TYPE:NS/NAME[,…] and/or --namespace NS[,…], or --all-repos");
    }
    if (refs.some((ref) => ref === "")) throw new UsageError("--repo has an empty repository reference");
    if (namespaces.some((ns) => ns === "")) throw new UsageError("--namespace has an empty namespace");
    // Checked before the database is opened, so a typo creates no data folder.
    refs.forEach(parseRepoRef);
    if (values.access !== "read" && values.access !== "write") {
      throw new UsageError(
        values.access === undefined ? "--access read|write is required" : `--access must be read or write, got ${JSON.stringify(values.access)}`,
      );
    }
    const access: Access = values.access;
    const expiresAt = values.expires === undefined ? null : parseExpires(values.expires, new Date());

    const config = loadAdminConfig(args.configFlags);
    const { secret, token } = await withHub(config, (hub) =>
      hub.tokens.create(OPERATOR, { repos: allRepos ? "all" : refs, namespaces, owner: values.user ?? null, access, expiresAt }),
    );
    const covers = allRepos ? "all repositories" : [...new Set(refs), ...namespaces.map((ns) => `${ns}/*`)].join(", ");
    const expiry = expiresAt === null ? "never expires" : `expires ${formatTime(expiresAt)}`;
    const user = token.owner === null ? "" : `user ${token.owner}, `;
    process.stderr.write(`Created token ${token.id} (${user}${access}, ${covers}, ${expiry}). Store it now: it is not shown again.\n`);
    process.stdout.write(`${secret}\n`);
    return EXIT_OK;
  });
}

function list(argv: string[]): Promise<number> {
  return runCommand("token list", async () => {
    const args = parseCommandLine(argv, {});
    if (args.help) return help(LIST_USAGE);
    expectPositionals(args.positionals, []);
    const { tokens, repos } = await withHub(loadAdminConfig(args.configFlags), async (hub) => ({
      tokens: await hub.tokens.list(OPERATOR),
      repos: (await hub.repos.list(OPERATOR)).repos,
    }));
    if (tokens.length === 0) {
      process.stderr.write("No hub tokens yet: create one with 'castor token create'.\n");
      return EXIT_OK;
    }
    const now = new Date();
    const refById = new Map(repos.map((repo: Repo) => [repo.id, formatRepoRef(repo)]));
    const coverage = (token: HubToken): string =>
      token.repos === "all" ? "all" : [...token.repos.map((id) => refById.get(id) ?? `#${id}`), ...token.namespaces.map((ns) => `${ns}/*`)].join(",");
    process.stdout.write(
      formatTable(
        ["ID", "USER", "ACCESS", "REPOS", "STATUS", "EXPIRES", "CREATED"],
        tokens.map((token) => [
          token.id,
          token.owner ?? "-",
          token.access,
          coverage(token),
          hubTokenState(token, now),
          token.expiresAt === null ? "never" : formatTime(token.expiresAt),
          formatTime(token.createdAt),
        ]),
      ),
    );
    return EXIT_OK;
  });
}

function revoke(argv: string[]): Promise<number> {
  return runCommand("token revoke", async () => {
    const args = parseCommandLine(argv, {});
    if (args.help) return help(REVOKE_USAGE);
    const [id] = expectPositionals(args.positionals, ["ID"]);
    const revoked = await withHub(loadAdminConfig(args.configFlags), (hub) => hub.tokens.revoke(OPERATOR, id));
    if (!revoked) {
      process.stderr.write(`castor token revoke: no hub token has the id ${JSON.stringify(id)}; see 'castor token list'.\n`);
      return EXIT_FAILURE;
    }
    process.stdout.write(`Revoked token ${id}.\n`);
    return EXIT_OK;
  });
}

function help(usage: string): number {
  process.stdout.write(usage);
  return EXIT_OK;
}
