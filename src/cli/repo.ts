/** `castor repo create TYPE NS/NAME` and `castor repo list`. */
import { loadConfig } from "../config.js";
import { formatRepoRef, requireRepoName, requireRepoType } from "../hub/names.js";
import { withHub } from "../hub/open.js";
import {
  CONFIG_FLAGS_HELP,
  EXIT_OK,
  expectPositionals,
  formatTable,
  formatTime,
  parseCommandLine,
  runCommand,
  runSubcommand,
} from "./args.js";

const USAGE = `Usage: castor repo <create|list> …

  castor repo create TYPE NAMESPACE/NAME   create a repository and its main branch [--public]
  castor repo list                         list repositories

Run 'castor repo create --help' for details.
`;

const CREATE_USAGE = `Usage: castor repo create TYPE NAMESPACE/NAME [--public] [--data-dir DIR]

Creates a repository and its main branch (with an empty initial commit). Repositories are
private unless --public: anyone, without a token, may read a public one.

  TYPE             model, dataset or space
  NAMESPACE/NAME   e.g. alice/bert: letters, digits, '.', '_', '-' (each part ≤ 96 characters)

${CONFIG_FLAGS_HELP}
`;

const LIST_USAGE = `Usage: castor repo list [--data-dir DIR]

Prints a table of every repository: type, name, creation time.

${CONFIG_FLAGS_HELP}
`;

export function run(argv: string[]): Promise<number> {
  return runSubcommand("repo", USAGE, { create, list }, argv);
}

function create(argv: string[]): Promise<number> {
  return runCommand("repo create", async () => {
    const args = parseCommandLine(argv, { public: { type: "boolean" } });
    if (args.help) return help(CREATE_USAGE);
    const [type, name] = expectPositionals(args.positionals, ["TYPE", "NAMESPACE/NAME"]);
    // Checked before the database is opened, so a typo creates no data folder.
    requireRepoType(type);
    requireRepoName(name);
    const config = loadConfig(process.env, args.configFlags);
    const repo = await withHub(config, (hub) => hub.createRepo(type, name, { private: args.values.public !== true }));
    process.stdout.write(`Created ${repo.private ? "private" : "public"} repository ${formatRepoRef(repo)} with branch main.\n`);
    return EXIT_OK;
  });
}

function list(argv: string[]): Promise<number> {
  return runCommand("repo list", async () => {
    const args = parseCommandLine(argv, {});
    if (args.help) return help(LIST_USAGE);
    expectPositionals(args.positionals, []);
    const repos = await withHub(loadConfig(process.env, args.configFlags), (hub) => hub.listRepos());
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

function help(usage: string): number {
  process.stdout.write(usage);
  return EXIT_OK;
}
