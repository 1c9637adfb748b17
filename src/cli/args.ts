/**
 * Shared command-line plumbing for castor's subcommands: option parsing on node:util
 * parseArgs that also accepts every configuration setting as a flag (`CASTOR_TOKEN_TTL` ⇔
 * `--token-ttl 60`) and hands those to `loadConfig`, subcommand dispatch, error reporting with
 * exit codes (2 = usage, 1 = failure, never a stack trace) and plain-text tables.
 */
import { parseArgs, type ParseArgsConfig } from "node:util";
import { ConfigError, SETTINGS, flagNameOf } from "../config.js";
import { HubError } from "../hub/errors.js";

/** The command line is wrong: unknown option, missing argument, bad value. Exit code 2. */
export class UsageError extends Error {
  override readonly name = "UsageError";
}

export const EXIT_OK = 0;
export const EXIT_FAILURE = 1;
export const EXIT_USAGE = 2;

type OptionsConfig = NonNullable<ParseArgsConfig["options"]>;
type ValuesOf<O extends OptionsConfig> = ReturnType<typeof parseArgs<{ options: O; strict: true; allowPositionals: true }>>["values"];

const CONFIG_FLAGS: ReadonlySet<string> = new Set(SETTINGS.map(flagNameOf));
const CONFIG_OPTIONS: OptionsConfig = Object.fromEntries([...CONFIG_FLAGS].map((flag) => [flag, { type: "string" }]));

/** One line for command usages: every setting may be given as a flag. */
export const CONFIG_FLAGS_HELP = `Every CASTOR_* setting may also be given as a flag: CASTOR_DATA_DIR ⇔ --data-dir DIR,
CASTOR_DATABASE_URL ⇔ --database-url URL, … (a flag wins over the environment).`;

export interface ParsedCommandLine<O extends OptionsConfig> {
  /** The command's own options, typed from its option config. */
  values: ValuesOf<O>;
  positionals: string[];
  /** Configuration flags that were given, in the shape `loadConfig(env, flags)` takes. */
  configFlags: Record<string, string>;
  /** `-h` / `--help` was given. */
  help: boolean;
}

/**
 * Parses `argv` against the command's own options plus the configuration flags and `--help`.
 * Positional counts are checked with `expectPositionals` once help has been ruled out.
 */
export function parseCommandLine<const O extends OptionsConfig>(argv: string[], options: O): ParsedCommandLine<O> {
  for (const name of Object.keys(options)) {
    if (CONFIG_FLAGS.has(name) || name === "help") throw new Error(`option --${name} clashes with a built-in flag`);
  }
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      options: { ...CONFIG_OPTIONS, ...options, help: { type: "boolean", short: "h" } },
      strict: true,
      allowPositionals: true,
    });
  } catch (err) {
    // parseArgs reports unknown options and missing values as TypeErrors with ERR_PARSE_ARGS_* codes.
    if (err instanceof TypeError && String((err as NodeJS.ErrnoException).code).startsWith("ERR_PARSE_ARGS")) {
      // Drop parseArgs' advice about '--' positionals, which only distracts here.
      throw new UsageError(err.message.replace(/\. To specify a positional argument.*$/s, ""));
    }
    throw err;
  }
  const values = parsed.values as Record<string, unknown>;
  const own: Record<string, unknown> = {};
  const configFlags: Record<string, string> = {};
  for (const [name, value] of Object.entries(values)) {
    if (name === "help") continue;
    if (CONFIG_FLAGS.has(name)) configFlags[name] = value as string;
    else own[name] = value;
  }
  return { values: own as ValuesOf<O>, positionals: parsed.positionals, configFlags, help: values.help === true };
}

/** Throws a UsageError unless there are exactly the named positionals; returns them. */
export function expectPositionals(positionals: string[], names: readonly string[]): string[] {
  if (positionals.length < names.length) {
    throw new UsageError(`missing ${names.slice(positionals.length).join(" ")}`);
  }
  if (positionals.length > names.length) {
    throw new UsageError(`unexpected argument ${JSON.stringify(positionals[names.length])}`);
  }
  return positionals;
}

/**
 * Runs a command body and turns what it throws into a message on stderr and an exit code:
 * usage problems (UsageError, invalid configuration, a hub 400 for a malformed argument) → 2,
 * anything else → 1. Only the message is printed, never a stack trace.
 */
export async function runCommand(command: string, body: () => Promise<number>): Promise<number> {
  try {
    return await body();
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    const usage = err instanceof UsageError || err instanceof ConfigError || (err instanceof HubError && err.status === 400);
    process.stderr.write(`castor ${command}: ${message}\n`);
    if (usage) {
      process.stderr.write(`Run 'castor ${command} --help' for usage.\n`);
      return EXIT_USAGE;
    }
    return EXIT_FAILURE;
  }
}

/**
 * Dispatches `castor GROUP SUB …` to a subcommand; `castor GROUP --help` prints the group's
 * usage to stdout, while a missing or unknown subcommand is a usage error.
 */
export async function runSubcommand(
  group: string,
  usage: string,
  subcommands: Record<string, (argv: string[]) => Promise<number>>,
  argv: string[],
): Promise<number> {
  const [sub, ...rest] = argv;
  if (sub === "-h" || sub === "--help" || sub === "help") {
    process.stdout.write(usage);
    return EXIT_OK;
  }
  const handler = sub === undefined ? undefined : Object.hasOwn(subcommands, sub) ? subcommands[sub] : undefined;
  if (handler === undefined) {
    const what = sub === undefined ? "a subcommand is required" : `unknown subcommand ${JSON.stringify(sub)}`;
    process.stderr.write(`castor ${group}: ${what} (one of ${Object.keys(subcommands).join(", ")}).\nRun 'castor ${group} --help' for usage.\n`);
    return EXIT_USAGE;
  }
  return handler(rest);
}

/** The value of `--FLAG N`: a whole number of `what` ≥ 1; undefined when the option is absent. */
export function parseCount(flag: string, value: string | undefined, what: string): number | undefined {
  if (value === undefined) return undefined;
  const count = Number(value);
  if (!(Number.isSafeInteger(count) && count >= 1)) throw new UsageError(`--${flag} must be a whole number of ${what} >= 1, got ${JSON.stringify(value)}`);
  return count;
}

/**
 * An AbortSignal that the first SIGINT or SIGTERM aborts (with an Error naming the signal), so a
 * long command can stop cleanly and remove what it half wrote; a second signal ends the process
 * at once, as usual. Call `dispose` when the command is done.
 */
export function interruptSignal(): { signal: AbortSignal; dispose(): void } {
  const controller = new AbortController();
  const signals = ["SIGINT", "SIGTERM"] as const;
  const onSignal = (name: NodeJS.Signals) => {
    dispose();
    controller.abort(new Error(`interrupted by ${name}`));
  };
  const dispose = () => {
    for (const name of signals) process.off(name, onSignal);
  };
  for (const name of signals) process.on(name, onSignal);
  return { signal: controller.signal, dispose };
}

/** Left-aligned columns separated by two spaces; the last column is not padded. */
export function formatTable(headers: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = headers.map((header, i) => Math.max(header.length, ...rows.map((row) => row[i]?.length ?? 0)));
  const line = (cells: readonly string[]): string =>
    cells
      .map((cell, i) => (i === cells.length - 1 ? cell : cell.padEnd(widths[i])))
      .join("  ")
      .trimEnd();
  return `${[line(headers), ...rows.map(line)].join("\n")}\n`;
}

/** `2030-01-31T12:00:00Z`: second precision reads better in a table than toISOString's milliseconds. */
export function formatTime(date: Date): string {
  return date.toISOString().replace(/\.\d{3}Z$/, "Z");
}
