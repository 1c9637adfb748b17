/**
 * `castor repo create TYPE NS/NAME` and `castor repo list` (alias `ls`), admin commands on the
 * data dir or database; `castor repo files TYPE:NS/NAME`, a client command through the hub.
 */
import { DEFAULT_ENDPOINT } from "../client/index.js";
import { loadAdminConfig } from "./stores.js";
import { formatRepoRef, requireRepoName, requireRepoType } from "../hub/names.js";
import { OPERATOR } from "../hub/access.js";
import { withHub } from "../hub/open.js";
import { CONFIG_FLAGS_HELP, EXIT_OK, expectPositionals, formatTable, formatTime, parseCommandLine, runCommand, runSubcommand } from "./args.js";
import { asUsageError, CLIENT_FLAGS, createClient } from "./client.js";

const USAGE = `Usage: castor repo <create|list|ls|files> …

  castor repo create TYPE NAMESPACE/NAME   create a repository and its main branch [--public]
  castor repo list                         list repositories (alias: ls)
  castor repo files TYPE:NAMESPACE/NAME    list the files of a revision, through the hub
                                           [--revision R] [--path FOLDER]

create and list work on the data dir (or database) like the other admin commands; files is a
client command: it asks the server with a hub token. Run 'castor repo COMMAND --help' for details.
`;

const CREATE_USAGE = `Usage: castor repo create TYPE NAMESPACE/NAME [--public] [--data-dir DIR]

Creates a repository and its main branch (with an empty initial commit). Repositories are
private unless --public: anyone, without a token, may read a public one.

  TYPE             model, dataset or space
  NAMESPACE/NAME   e.g. alice/bert: letters, digits, '.', '_', '-' (each part ≤ 96 characters)

${CONFIG_FLAGS_HELP}
`;

const LIST_USAGE = `Usage: castor repo list [--data-dir DIR]
       castor repo ls [--data-dir DIR]

Prints a table of every repository: type, name, visibility, creation time.

${CONFIG_FLAGS_HELP}
`;

const FILES_USAGE = `Usage: castor repo files TYPE:NAMESPACE/NAME [--revision R] [--path FOLDER]

Lists the files of a revision of the repository, asking the server through its hub routes
(it needs no access to the data dir, only a hub token that may read the repository). Prints a
table on stdout,
  PATH  SIZE  STORAGE
with SIZE in bytes and STORAGE "xet" (stored as chunks through Xet) or "inline" (kept whole by
the hub: empty files, and small text files uploaded with hf), and a count on stderr.
'castor download --repo TYPE:NAMESPACE/NAME PATH' downloads one.

  --revision R          branch, tag or commit (default: main)
  --path FOLDER         only the files below this folder
  --endpoint URL        the castor server, its public URL (default: $CASTOR_ENDPOINT, else
                        ${DEFAULT_ENDPOINT})
  --hub-token TOKEN     a hub token with read access (default: $CASTOR_HUB_TOKEN)

Exit codes: 0 success, 1 failure (e.g. no such repository or revision), 2 bad command line.
`;

export function run(argv: string[]): Promise<number> {
  return runSubcommand("repo", USAGE, { create, list, ls: list, files }, argv);
}

function create(argv: string[]): Promise<number> {
  return runCommand("repo create", async () => {
    const args = parseCommandLine(argv, { public: { type: "boolean" } });
    if (args.help) return help(CREATE_USAGE);
    const [type, name] = expectPositionals(args.positionals, ["TYPE", "NAMESPACE/NAME"]);
    // Checked before the database is opened, so a typo creates no data folder.
    requireRepoType(type);
    requireRepoName(name);
    const config = loadAdminConfig(args.configFlags);
    const repo = await withHub(config, (hub) => hub.repos.create(OPERATOR, type, name, { private: args.values.public !== true }));
    process.stdout.write(`Created ${repo.private ? "private" : "public"} repository ${formatRepoRef(repo)} with branch main.\n`);
    return EXIT_OK;
  });
}

function list(argv: string[]): Promise<number> {
  return runCommand("repo list", async () => {
    const args = parseCommandLine(argv, {});
    if (args.help) return help(LIST_USAGE);
    expectPositionals(args.positionals, []);
    const { repos } = await withHub(loadAdminConfig(args.configFlags), (hub) => hub.repos.list(OPERATOR));
    if (repos.length === 0) {
      process.stderr.write("No repositories yet: create one with 'castor repo create TYPE NAMESPACE/NAME'.\n");
      return EXIT_OK;
    }
    process.stdout.write(
      formatTable(
        ["TYPE", "NAME", "VISIBILITY", "CREATED"],
        repos.map((repo) => [repo.type, repo.name, repo.private ? "private" : "public", formatTime(repo.createdAt)]),
      ),
    );
    return EXIT_OK;
  });
}

function files(argv: string[]): Promise<number> {
  return runCommand("repo files", async () => {
    const { repo: _repoIsPositional, ...flags } = CLIENT_FLAGS;
    const args = parseCommandLine(argv, { ...flags, path: { type: "string" } });
    if (args.help) return help(FILES_USAGE);
    const [ref] = expectPositionals(args.positionals, ["TYPE:NAMESPACE/NAME"]);
    const client = createClient(args.values, ref);
    let listed;
    try {
      listed = await client.listFiles({ path: args.values.path });
    } catch (error) {
      throw asUsageError(error);
    }
    const where = `${formatRepoRef(client.repo)} at ${client.revision}${args.values.path === undefined ? "" : `, below ${args.values.path}`}`;
    if (listed.length === 0) {
      process.stderr.write(`No files in ${where}.\n`);
      return EXIT_OK;
    }
    process.stdout.write(
      formatTable(
        ["PATH", "SIZE", "STORAGE"],
        listed.map((file) => [file.path, String(file.size), file.storage]),
      ),
    );
    const bytes = listed.reduce((sum, file) => sum + file.size, 0);
    process.stderr.write(`${listed.length} file${listed.length === 1 ? "" : "s"}, ${bytes} bytes, in ${where}.\n`);
    return EXIT_OK;
  });
}

function help(usage: string): number {
  process.stdout.write(usage);
  return EXIT_OK;
}
