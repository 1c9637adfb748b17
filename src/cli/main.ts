/**
 * `castor` command entry point. Each subcommand lives in its own module and is imported only
 * when invoked, so a quick admin call never pays for loading the server.
 */
import { VERSION } from "./version.js";

const USAGE = `castor ${VERSION} — self-hosted Xet-compatible content-addressable storage

Usage: castor <command> [options]

Commands:
  serve                          start the server: the hub (Hugging Face routes, token
                                 operation) and the CAS
Administration (on the data dir or database, like the server):
  repo create TYPE NS/NAME       create a repository (TYPE: model, dataset, space)
  repo list                      list repositories (alias: repo ls)
  revision create TYPE:NS/NAME NAME [--tag]
                                 create a branch (or tag) in a repository
  token create [--user NAME] (--repo TYPE:NS/NAME[,...] | --namespace NS[,...] | --all-repos)
               --access read|write [--expires D]
                                 create a hub token; prints it once
  token list                     list hub tokens (never their secrets)
  token revoke ID                revoke a hub token
  migrate --from DATA_DIR        copy an embedded data dir into the configured
                                 PostgreSQL + S3 stores (safe to run again)
  fsck [--repair]                check the stores: xorb blobs re-validated, file terms,
                                 histories and dedup entries resolved, orphan blobs
                                 listed; exit 1 on damage (--repair removes what is
                                 corrupt or dangling)
  gc [--dry-run] [--grace 24h] [--mirror-unused 30d]
                                 remove what no branch or tag reaches and no client used
                                 within the grace window (safe while serving); evict mirrored
                                 files unused for a while
  backup DEST [--copy]           consistent copy of the embedded data dir into the new
                                 folder DEST, while the server runs (blobs hard-linked
                                 on the same filesystem unless --copy)
  restore SRC [--force]          restore a backup into an empty data dir, checked before
                                 anything is moved into place
  stats [--history] [--json]     storage statistics: logical and stored bytes, dedup ratio,
                                 per repository and in total; daily samples with --history
  mirror pull TYPE:NS/NAME[@REV] [--include GLOB]...
                                 fetch a repository of the upstream hub (CASTOR_UPSTREAM_URL)
                                 ahead of time, for clients and for when it is unreachable
  mirror list                    mirrored repositories: revisions, bytes held, last use
Client (through the server, with --endpoint and a hub token, or CASTOR_ENDPOINT and
CASTOR_HUB_TOKEN):
  upload --repo TYPE:NS/NAME [--path IN_REPO] [--revision BRANCH] [-m MESSAGE] FILE...
                                 upload files through Xet and commit them to a branch
  download --repo TYPE:NS/NAME PATH [-o OUT] [--revision R] [--range A-B]
                                 download a file by its path in the repository
  download --repo TYPE:NS/NAME --hash HASH -o OUT [--range A-B]
                                 download a file by its file hash
  repo files TYPE:NS/NAME [--revision R]
                                 list a revision's files: path, size, xet or inline

Options:
  -h, --help                     show this help
  -v, --version                  print the version

Configuration comes from CASTOR_* environment variables (see README.md, "Configuration").
Run 'castor COMMAND --help' for a command's options.
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
  fsck: () => import("./fsck.js"),
  gc: () => import("./gc.js"),
  backup: () => import("./backup.js"),
  restore: () => import("./restore.js"),
  stats: () => import("./stats.js"),
  mirror: () => import("./mirror.js"),
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
