/**
 * `castor` command entry point. Each subcommand lives in its own module and is imported only
 * when invoked, so a quick admin call never pays for loading the server.
 */
import { readFileSync } from "node:fs";

export const VERSION: string = JSON.parse(
  readFileSync(new URL("../../package.json", import.meta.url), "utf8"),
).version;

const USAGE = `castor ${VERSION} — self-hosted Xet-compatible content-addressable storage

Usage: castor <command> [options]

Commands:
  serve                          start the CAS server and hub token operation
  repo create TYPE NS/NAME       create a repository (TYPE: model, dataset, space)
  repo list                      list repositories
  revision create TYPE:NS/NAME NAME [--tag]
                                 create a branch (or tag) in a repository
  token create (--repo TYPE:NS/NAME[,...] | --all-repos) --access read|write [--expires D]
                                 create a hub token; prints it once
  token list                     list hub tokens (never their secrets)
  token revoke ID                revoke a hub token
  upload --repo TYPE:NS/NAME [--revision R] FILE...
                                 upload files, print their hashes
  download --repo TYPE:NS/NAME HASH -o OUT [--range A-B]
                                 download a file (or an inclusive byte range) by hash
  migrate --from DATA_DIR        copy an embedded data dir into the configured
                                 PostgreSQL + S3 stores (safe to run again)

Options:
  -h, --help                     show this help
  -v, --version                  print the version

Configuration comes from CASTOR_* environment variables (see README.md, "Configuration").
`;

type CommandModule = { run(argv: string[]): Promise<number> };

const COMMANDS: Record<string, () => Promise<CommandModule>> = {
  serve: () => import("./serve.js"),
  repo: () => import("./repo.js"),
  revision: () => import("./revision.js"),
  token: () => import("./token.js"),
  upload: () => import("./upload.js"),
  download: () => import("./download.js"),
  migrate: () => import("./migrate.js"),
};

export async function run(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (command === undefined || command === "-h" || command === "--help" || command === "help") {
    process.stdout.write(USAGE);
    return command === undefined ? 1 : 0;
  }
  if (command === "-v" || command === "--version") {
    process.stdout.write(`${VERSION}\n`);
    return 0;
  }
  const load = COMMANDS[command];
  if (!load) {
    process.stderr.write(`castor: unknown command '${command}'. Run 'castor --help' for the list of commands.\n`);
    return 2;
  }
  return (await load()).run(rest);
}
