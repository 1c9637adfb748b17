/**
 * How the hub routes check requests against their schemas (src/wire/hub.ts): with TypeBox's own
 * compiled validator instead of fastify's Ajv, because it checks types and never converts them.
 * Fastify's default would take `"size": "12"` for 12 and `"tag": 5` for "5", which the routes
 * refused before they had schemas and clients should still learn about.
 *
 * A request that breaks a schema is refused with 400 naming the part and the field, what was
 * wrong, and what the schema says the field is —
 *
 *     Invalid request: body.files[3].size must be integer (its size, a whole number of bytes)
 *
 * rather than a bare `body/files/3/size must be integer`.
 */
import type { FastifyInstance } from "fastify";
import type { TSchema } from "typebox";
import type { TLocalizedValidationError } from "typebox/error";
import { Compile } from "typebox/compile";

type Schema = Record<string, unknown>;

/** Validates every route of `app` (and its child plugins) this way. */
export function installHubValidation(app: FastifyInstance): void {
  app.setValidatorCompiler(({ schema, httpPart }) => {
    const validator = Compile(schema as TSchema);
    const part = httpPart ?? "request";
    // fastify keeps `value` as the part's value, and answers `error` with 400 (FST_ERR_VALIDATION).
    return (data: unknown) =>
      validator.Check(data) ? { value: data } : { error: new Error(describeSchemaError(schema as Schema, validator.Errors(data), part)) };
  });
}

/** The refusal's words for the errors of one part (`body`, `querystring`, `params`) of a request. */
export function describeSchemaError(schema: Schema, errors: TLocalizedValidationError[], part: string): string {
  // Of a union's errors (one per alternative, then the union's), the union's says the most.
  const error = errors.find((e) => e.keyword === "anyOf") ?? errors[0];
  if (error === undefined) return `${part} does not match its schema`;
  const where = `${part}${fieldPath(error.instancePath)}`;
  const wanted = at(schema, error.schemaPath);
  if (error.keyword === "required") {
    const field = String((error.params as { requiredProperties?: unknown[] }).requiredProperties?.[0]);
    return `${where} needs "${field}"${hint(at(wanted, `properties/${field}`))}`;
  }
  const message = error.keyword === "anyOf" && wanted !== undefined ? `must be ${alternatives(wanted)}` : error.message;
  return `${where} ${message}${hint(wanted)}`;
}

/** `/files/3/size` → `.files[3].size`. */
function fieldPath(instancePath: string): string {
  return instancePath
    .split("/")
    .slice(1)
    .map((segment) => (/^\d+$/.test(segment) ? `[${segment}]` : `.${segment.replace(/~1/g, "/").replace(/~0/g, "~")}`))
    .join("");
}

/** The subschema a JSON pointer (`#/properties/files/items`) names in `schema`. */
function at(schema: Schema | undefined, pointer: string): Schema | undefined {
  let node: unknown = schema;
  for (const segment of pointer.replace(/^#\/?/, "").split("/")) {
    if (segment === "") continue;
    if (typeof node !== "object" || node === null) return undefined;
    node = (node as Record<string, unknown>)[segment.replace(/~1/g, "/").replace(/~0/g, "~")];
  }
  return typeof node === "object" && node !== null ? (node as Schema) : undefined;
}

/** The field's description, or (for a nullable field) its alternative's. */
function hint(schema: Schema | undefined): string {
  const described = [schema, ...((schema?.anyOf as Schema[] | undefined) ?? [])].find((option) => typeof option?.description === "string");
  return described === undefined ? "" : ` (${described.description})`;
}

/** A union's alternatives: `"all" or array`. */
function alternatives(schema: Schema): string {
  const options = (schema.anyOf as Schema[] | undefined) ?? [];
  return options.map((option) => ("const" in option ? JSON.stringify(option.const) : String(option.type ?? "something else"))).join(" or ");
}
