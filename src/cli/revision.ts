/** `castor revision create TYPE:NS/NAME NAME [--tag]`. */
import { loadAdminConfig } from "./stores.js";
import { parseRepoRef, requireNewRevisionName } from "../hub/names.js";
import { OPERATOR } from "../hub/access.js";
import { withHub } from "../hub/open.js";
import { CONFIG_FLAGS_HELP, EXIT_OK, expectPositionals, parseCommandLine, runCommand, runSubcommand } from "./args.js";

const USAGE = `Usage: castor revision create TYPE:NAMESPACE/NAME NAME [--tag]

Run 'castor revision create --help' for details.
`;

const CREATE_USAGE = `Usage: castor revision create TYPE:NAMESPACE/NAME NAME [--tag] [--data-dir DIR]

Creates a branch (or, with --tag, a tag) in a repository. CAS tokens are issued per
repository and revision, so a client can only ask for tokens on revisions that exist.

  TYPE:NAMESPACE/NAME   the repository, e.g. model:alice/bert
  NAME                  git-ref-like: may contain '/', no spaces, no '..', ≤ 255 characters;
                        not HEAD, not a 40-hex commit id
  --tag                 create a tag instead of a branch

${CONFIG_FLAGS_HELP}
`;

export function run(argv: string[]): Promise<number> {
  return runSubcommand("revision", USAGE, { create }, argv);
}

function create(argv: string[]): Promise<number> {
  return runCommand("revision create", async () => {
    const args = parseCommandLine(argv, { tag: { type: "boolean" } });
    if (args.help) {
      process.stdout.write(CREATE_USAGE);
      return EXIT_OK;
    }
    const [repoRef, name] = expectPositionals(args.positionals, ["TYPE:NAMESPACE/NAME", "NAME"]);
    // Checked before the database is opened, so a typo creates no data folder.
    const address = parseRepoRef(repoRef);
    requireNewRevisionName(name);
    const kind = args.values.tag === true ? "tag" : "branch";
    const config = loadAdminConfig(args.configFlags);
    const revision = await withHub(config, (hub) => hub.repos.createRevision(OPERATOR, address, name, kind));
    // createRevision accepted repoRef, so it is a valid TYPE:NAMESPACE/NAME worth echoing.
    process.stdout.write(`Created ${revision.kind} ${revision.name} in ${repoRef}.\n`);
    return EXIT_OK;
  });
}
