// The `castor` command run from source (through tsx), for tests that drive the CLI as a real child process.
import { run } from "../../src/cli/main.js";

process.exitCode = await run(process.argv.slice(2));
