/**
 * The JSON shapes of castor's hub routes, declared once as JSON Schema (TypeBox) with the types
 * derived from them: the routes (src/http/hub) validate requests and serialize answers with the
 * schemas, and the web interface (web/src/api.ts) and castor's client (src/client/hub.ts) import
 * the types. Field names are the Hugging Face Hub's (castor's HUB-API notes); what castor adds
 * lives below `/api/castor/`.
 *
 * Request schemas say what castor reads and accept what clients add besides (query parameters and
 * body fields castor ignores); response schemas list every field an answer has, since the
 * serializer drops the ones they do not name.
 */
import { Type, type Static, type TSchema } from "typebox";

const Nullable = <T extends TSchema>(schema: T) => Type.Union([schema, Type.Null()]);

// --- path parameters ---------------------------------------------------------------------------

/** `/api/{type}s/{namespace}/{name}/…`: the type in the plural (checked by the route, which names the accepted ones). */
export const RepoParams = Type.Object({ types: Type.String(), namespace: Type.String(), name: Type.String(), "*": Type.Optional(Type.String()) });
export type RepoParams = Static<typeof RepoParams>;

/** File URLs (`/{prefix}{namespace}/{name}/resolve/…`): the type is in the prefix. */
export const FileUrlParams = Type.Object({ namespace: Type.String(), name: Type.String(), "*": Type.Optional(Type.String()) });
export type FileUrlParams = Static<typeof FileUrlParams>;

/** The LFS batch URL names the repository `name` or `name.git`. */
export const LfsBatchParams = Type.Object({ namespace: Type.String(), repoGit: Type.String() });
export type LfsBatchParams = Static<typeof LfsBatchParams>;

/** `…/info/lfs/objects/{oid}`: a Git LFS object of the basic transfer. */
export const LfsObjectParams = Type.Object({ namespace: Type.String(), repoGit: Type.String(), oid: Type.String() });
export type LfsObjectParams = Static<typeof LfsObjectParams>;

export const TypesParams = Type.Object({ types: Type.String() });
export type TypesParams = Static<typeof TypesParams>;

/** `DELETE /api/castor/tokens/{id}`. */
export const TokenIdParams = Type.Object({ id: Type.String() });
export type TokenIdParams = Static<typeof TokenIdParams>;

// --- query strings -------------------------------------------------------------------------------

export const ListReposQuery = Type.Object(
  { author: Type.Optional(Type.String()), search: Type.Optional(Type.String()), limit: Type.Optional(Type.String()), cursor: Type.Optional(Type.String()) },
  { additionalProperties: Type.Unknown() },
);
export type ListReposQuery = Static<typeof ListReposQuery>;

export const RepoInfoQuery = Type.Object({ blobs: Type.Optional(Type.String()) });
export type RepoInfoQuery = Static<typeof RepoInfoQuery>;

export const TreeQuery = Type.Object({
  recursive: Type.Optional(Type.String()),
  expand: Type.Optional(Type.String()),
  cursor: Type.Optional(Type.String()),
  limit: Type.Optional(Type.String()),
});
export type TreeQuery = Static<typeof TreeQuery>;

export const CommitsQuery = Type.Object({ p: Type.Optional(Type.String()), limit: Type.Optional(Type.String()) });
export type CommitsQuery = Static<typeof CommitsQuery>;

export const ExpandQuery = Type.Object({ expand: Type.Optional(Type.String()) });
export type ExpandQuery = Static<typeof ExpandQuery>;

export const PullRequestQuery = Type.Object({ create_pr: Type.Optional(Type.String()) });
export type PullRequestQuery = Static<typeof PullRequestQuery>;

/** A signed Git LFS action URL's expiry (unix ms) and signature; absent when the request brings credentials instead. */
export const LfsObjectQuery = Type.Object({ x: Type.Optional(Type.String()), s: Type.Optional(Type.String()) }, { additionalProperties: Type.Unknown() });
export type LfsObjectQuery = Static<typeof LfsObjectQuery>;

/** `GET /api/stats?history=N`: the route checks the number (0 to 36,600). */
export const StatsQuery = Type.Object({
  history: Type.Optional(Type.String({ description: "how many of the last daily samples to include: one number of days" })),
});
export type StatsQuery = Static<typeof StatsQuery>;

/** `GET /api/castor/sharing?repo=TYPE:NS/NAME&revision=R&path=P`, each once. */
export const SharingQuery = Type.Object({
  repo: Type.String({ minLength: 1, description: "the repository, as TYPE:NAMESPACE/NAME (e.g. model:alice/bert)" }),
  revision: Type.String({ minLength: 1, description: "a branch, tag or commit id" }),
  path: Type.String({ minLength: 1, description: "the file's path in the repository" }),
});
export type SharingQuery = Static<typeof SharingQuery>;

// --- request bodies ------------------------------------------------------------------------------
//
// JSON bodies castor reads. Fields clients send besides are accepted and ignored; `null` reads as
// absent where clients send it for "not given" (huggingface_hub's `organization`, the web
// interface's `owner` and `expires`). A body that breaks one is refused with 400 naming the
// field and, where given, its description. The NDJSON commit payload is parsed line by line by
// src/hub/commit-payload.ts, which bounds each line before it is parsed.

/** `POST /api/repos/create` and `DELETE /api/repos/delete`: `name` may itself be `namespace/name`. */
export const NamedRepoBody = Type.Object({
  name: Type.String({ minLength: 1, description: "the repository's name, or namespace/name" }),
  organization: Type.Optional(Nullable(Type.String({ description: "the namespace, when name has none" }))),
  type: Type.Optional(Nullable(Type.String({ description: "model, dataset or space (default: model)" }))),
  private: Type.Optional(Nullable(Type.Boolean({ description: "true for a private repository (the default), false for a public one" }))),
  /** `"private"` or `"public"`, as newer clients send it; another value is ignored. */
  visibility: Type.Optional(Type.Unknown()),
  /** `@huggingface/hub`'s createRepo({files}): refused when not empty (upload them with a commit). */
  files: Type.Optional(Type.Array(Type.Unknown())),
});
export type NamedRepoBody = Static<typeof NamedRepoBody>;

/** `POST /api/repos/move` (`move_repo`). */
export const MoveRepoBody = Type.Object({
  fromRepo: Type.String({ minLength: 1, description: "the repository to move, as namespace/name" }),
  toRepo: Type.String({ minLength: 1, description: "its new name, as namespace/name" }),
  type: Type.Optional(Nullable(Type.String({ description: "model, dataset or space (default: model)" }))),
});
export type MoveRepoBody = Static<typeof MoveRepoBody>;

/** `PUT …/settings`: visibility; a gated repository is refused (castor has no gating), other settings are accepted and ignored. */
export const SettingsBody = Type.Object({
  private: Type.Optional(Nullable(Type.Boolean({ description: "true for private, false for public" }))),
  visibility: Type.Optional(Type.Unknown()),
  gated: Type.Optional(Type.Unknown()),
});
export type SettingsBody = Static<typeof SettingsBody>;

/** `POST …/branch/{name}`: the new branch starts at `startingPoint` (default: main's head). */
export const CreateBranchBody = Type.Object({
  startingPoint: Type.Optional(Nullable(Type.String({ minLength: 1, description: "the revision the branch starts at: a branch, tag or commit id" }))),
});
export type CreateBranchBody = Static<typeof CreateBranchBody>;

/** `POST …/tag/{revision}`: the revision to tag is in the path, the tag in the body. */
export const CreateTagBody = Type.Object({
  tag: Type.String({ minLength: 1, description: "the new tag's name" }),
  message: Type.Optional(Nullable(Type.String())),
});
export type CreateTagBody = Static<typeof CreateTagBody>;

/** `POST …/super-squash/{branch}`. */
export const SquashBody = Type.Object({
  message: Type.Optional(Nullable(Type.String({ description: "the message of the one commit left" }))),
});
export type SquashBody = Static<typeof SquashBody>;

/** `POST …/paths-info/{rev}`, as JSON or as a form (huggingface_hub: repeated `paths`, `expand=True`), read into this shape. */
export const PathsInfoBody = Type.Object({
  paths: Type.Array(Type.String(), { description: "the paths to look up, as a list of strings" }),
  expand: Type.Optional(Type.Union([Type.Boolean(), Type.String()], { description: "true for each entry's last commit" })),
});
export type PathsInfoBody = Static<typeof PathsInfoBody>;

/** A file of `POST …/preupload/{rev}`. */
export const PreuploadFile = Type.Object(
  {
    path: Type.String({ description: "the file's path in the repository" }),
    sample: Type.String({ description: "its first (up to) 512 bytes, base64" }),
    size: Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER, description: "its size, a whole number of bytes" }),
  },
  { description: 'a file: {"path", "sample", "size"}' },
);
export type PreuploadFile = Static<typeof PreuploadFile>;

/** `POST …/preupload/{rev}`. */
export const PreuploadBody = Type.Object({
  files: Type.Array(PreuploadFile, { description: 'the files to upload: [{"path", "sample", "size"}]' }),
});
export type PreuploadBody = Static<typeof PreuploadBody>;

/**
 * The Git LFS batch request (`POST …/info/lfs/objects/batch`). The fields are checked by
 * src/hub/lfs-batch.ts, which answers a malformed object with the 422 Git LFS clients expect.
 */
export const LfsBatchBody = Type.Object(
  {
    operation: Type.Optional(Type.Unknown()),
    transfers: Type.Optional(Type.Unknown()),
    objects: Type.Optional(Type.Unknown()),
    ref: Type.Optional(Type.Unknown()),
    hash_algo: Type.Optional(Type.Unknown()),
  },
  { description: "the LFS batch request: a JSON object with operation, transfers and objects" },
);
export type LfsBatchBody = Static<typeof LfsBatchBody>;

/** `POST /api/castor/tokens`: `castor token create` over HTTP. */
export const CreateTokenBody = Type.Object({
  access: Type.Union([Type.Literal("read"), Type.Literal("write")], { description: '"read" or "write"' }),
  repos: Type.Optional(
    Type.Union([Type.Literal("all"), Type.Array(Type.String())], { description: '"all", or the repositories as a list of TYPE:NAMESPACE/NAME' }),
  ),
  namespaces: Type.Optional(Type.Array(Type.String(), { description: "namespaces covered wholly, as a list" })),
  owner: Type.Optional(Nullable(Type.String({ description: "the user the token acts for" }))),
  expires: Type.Optional(Nullable(Type.String({ description: "when it expires: a duration (30d) or an ISO 8601 date" }))),
});
export type CreateTokenBody = Static<typeof CreateTokenBody>;

/** `POST /api/castor/download-links`: the file (at the revision's commit) a signed link is asked for. */
export const DownloadLinkBody = Type.Object({
  repo: Type.String({ minLength: 1, description: "the repository, as TYPE:NAMESPACE/NAME (e.g. model:alice/bert)" }),
  revision: Type.Optional(Nullable(Type.String({ minLength: 1, description: "a branch, tag or commit id (default: main)" }))),
  path: Type.String({ minLength: 1, description: "the file's path in the repository" }),
});
export type DownloadLinkBody = Static<typeof DownloadLinkBody>;

// --- the commit payload ------------------------------------------------------------------------
//
// `POST …/commit/{branch}` takes NDJSON (HUB-API §6): a header line, then one operation per line.
// src/hub/commit-payload.ts reads it as it arrives, one bounded line at a time, refusing a line
// at its number; castor's client writes it (src/client/hub.ts `encodeCommit`).

export const CommitHeaderLine = Type.Object({
  key: Type.Literal("header"),
  value: Type.Object({ summary: Type.String(), description: Type.Optional(Nullable(Type.String())), parentCommit: Type.Optional(Nullable(Type.String())) }),
});

/** A file carried inline, base64, smaller than the hub's inline limit. */
export const CommitFileLine = Type.Object({
  key: Type.Literal("file"),
  value: Type.Object({ path: Type.String(), content: Type.String(), encoding: Type.Optional(Type.Literal("base64")) }),
});

/** A file uploaded through Xet, named by its SHA-256 (`oid`); without `size`, a copy of content the repository holds. */
export const CommitLfsFileLine = Type.Object({
  key: Type.Literal("lfsFile"),
  value: Type.Object({
    path: Type.String(),
    algo: Type.Optional(Type.Literal("sha256")),
    oid: Type.String(),
    size: Type.Optional(Type.Integer({ minimum: 0 })),
  }),
});

export const CommitDeletionLine = Type.Object({
  key: Type.Union([Type.Literal("deletedFile"), Type.Literal("deletedFolder")]),
  value: Type.Object({ path: Type.String() }),
});

export const CommitLine = Type.Union([CommitHeaderLine, CommitFileLine, CommitLfsFileLine, CommitDeletionLine]);
export type CommitLine = Static<typeof CommitLine>;

// --- answers -----------------------------------------------------------------------------------

/** `GET /api/whoami-v2`. */
export const WhoAmI = Type.Object({
  type: Type.Literal("user"),
  id: Type.String(),
  name: Type.String(),
  fullname: Type.String(),
  email: Type.Null(),
  emailVerified: Type.Boolean(),
  isPro: Type.Boolean(),
  canPay: Type.Boolean(),
  avatarUrl: Type.String(),
  orgs: Type.Array(Type.Object({ type: Type.Literal("org"), name: Type.String(), fullname: Type.String(), id: Type.String() })),
  auth: Type.Object({
    type: Type.Literal("access_token"),
    accessToken: Type.Object({ displayName: Type.String(), role: Type.Union([Type.Literal("read"), Type.Literal("write")]), createdAt: Type.String() }),
  }),
});
export type WhoAmI = Static<typeof WhoAmI>;

/** The answer of `POST /api/repos/create` and `/api/repos/move`. */
export const RepoUrl = Type.Object({ url: Type.String(), name: Type.String(), id: Type.String() });
export type RepoUrl = Static<typeof RepoUrl>;

/** The Hub's 409 for a name taken: the error and the URL of the repository holding it. */
export const RepoConflict = Type.Object({ error: Type.String(), url: Type.String() });
export type RepoConflict = Static<typeof RepoConflict>;

const RepoSummaryFields = {
  _id: Type.String(),
  id: Type.String(),
  modelId: Type.Optional(Type.String()),
  author: Type.String(),
  /** The head of `main`; absent for a repository whose main has no commit yet. */
  sha: Type.Optional(Type.String()),
  lastModified: Type.String(),
  createdAt: Type.String(),
  private: Type.Boolean(),
  disabled: Type.Boolean(),
  gated: Type.Boolean(),
  downloads: Type.Integer(),
  likes: Type.Integer(),
  tags: Type.Array(Type.String()),
  /** castor's own field (clients ignore it): a read-only mirror of the upstream hub's repository of that name. */
  mirror: Type.Optional(Type.Boolean()),
};

/** An item of `GET /api/{type}s`. */
export const RepoSummary = Type.Object(RepoSummaryFields);
export type RepoSummary = Static<typeof RepoSummary>;

/** A file of repository info (`siblings`): the name, and with `?blobs=true` its size, blob id and LFS facts. */
export const Sibling = Type.Object({
  rfilename: Type.String(),
  size: Type.Optional(Type.Integer()),
  blobId: Type.Optional(Type.String()),
  lfs: Type.Optional(Type.Object({ size: Type.Integer(), sha256: Type.String(), pointerSize: Type.Integer() })),
});
export type Sibling = Static<typeof Sibling>;

/** `GET /api/{type}s/{ns}/{name}` and `…/revision/{rev}`. */
export const RepoInfo = Type.Object({ ...RepoSummaryFields, siblings: Type.Array(Sibling), sdk: Type.Optional(Type.String()) });
export type RepoInfo = Static<typeof RepoInfo>;

/** A tree or paths-info entry: `lfs` and `xetHash` for Xet-stored files, `lastCommit` in expanded listings. */
export const TreeEntry = Type.Object({
  type: Type.Union([Type.Literal("file"), Type.Literal("directory")]),
  path: Type.String(),
  oid: Type.String(),
  size: Type.Integer(),
  lfs: Type.Optional(Type.Object({ oid: Type.String(), size: Type.Integer(), pointerSize: Type.Integer() })),
  xetHash: Type.Optional(Type.String()),
  lastCommit: Type.Optional(Type.Object({ id: Type.String(), title: Type.String(), date: Type.String() })),
});
export type TreeEntry = Static<typeof TreeEntry>;

export const TreeEntries = Type.Array(TreeEntry);

/** An item of `GET …/commits/{rev}`. */
export const Commit = Type.Object({
  id: Type.String(),
  title: Type.String(),
  message: Type.String(),
  authors: Type.Array(Type.Object({ user: Type.String() })),
  date: Type.String(),
  parents: Type.Array(Type.String()),
});
export type Commit = Static<typeof Commit>;

export const Commits = Type.Array(Commit);

const Ref = Type.Object({ name: Type.String(), ref: Type.String(), targetCommit: Type.String() });

/** `GET …/refs`. */
export const Refs = Type.Object({ branches: Type.Array(Ref), tags: Type.Array(Ref), converts: Type.Array(Type.Unknown()) });
export type Refs = Static<typeof Refs>;

/** `POST …/preupload/{rev}`. */
export const PreuploadAnswer = Type.Object({
  files: Type.Array(
    Type.Object({
      path: Type.String(),
      uploadMode: Type.Union([Type.Literal("regular"), Type.Literal("lfs")]),
      shouldIgnore: Type.Boolean(),
      oid: Type.Optional(Type.String()),
    }),
  ),
  commitOid: Type.String(),
});
export type PreuploadAnswer = Static<typeof PreuploadAnswer>;

/** `POST …/commit/{branch}`. */
export const CommitAnswer = Type.Object({ commitOid: Type.String(), commitUrl: Type.String(), success: Type.Boolean() });
export type CommitAnswer = Static<typeof CommitAnswer>;

/** `POST …/super-squash/{branch}`. */
export const SquashAnswer = Type.Object({ commitId: Type.String() });
export type SquashAnswer = Static<typeof SquashAnswer>;

/** `PUT …/settings` with a visibility. */
export const SettingsAnswer = Type.Object({ private: Type.Optional(Type.Boolean()) });
export type SettingsAnswer = Static<typeof SettingsAnswer>;

/** The answer of calls that only succeed (deletions, branches, tags, revocations). */
export const Done = Type.Object({});

/** `POST /api/validate-yaml`: castor accepts any model card. */
export const ValidateYamlAnswer = Type.Object({ errors: Type.Array(Type.Unknown()), warnings: Type.Array(Type.Unknown()) });

/** `GET /api/agent-harnesses`: the hf CLI's registry, empty. */
export const AgentHarnesses = Type.Object({ standardEnvVars: Type.Array(Type.Unknown()), harnesses: Type.Record(Type.String(), Type.Unknown()) });

/**
 * A Xet-stored file described instead of sent: `GET …/resolve/{rev}/{path}` with
 * `Accept: application/vnd.xet-fileinfo+json` (`@huggingface/hub`'s downloads).
 */
export const XetFileInfo = Type.Object({
  hash: Type.String(),
  size: Type.Integer(),
  etag: Type.String(),
  refreshUrl: Type.String(),
  reconstructionUrl: Type.String(),
});
export type XetFileInfo = Static<typeof XetFileInfo>;

/** The Git LFS batch answer: the `xet` transfer, and per object an upload action, nothing (stored already) or a 422 error. */
/** An action: the Xet write-token route with a session header, or a signed basic-transfer URL with its lifetime. */
const LfsAction = Type.Object({
  href: Type.String(),
  header: Type.Optional(Type.Record(Type.String(), Type.String())),
  expires_in: Type.Optional(Type.Integer()),
});

export const LfsBatchAnswer = Type.Object({
  transfer: Type.Union([Type.Literal("xet"), Type.Literal("basic")]),
  hash_algo: Type.Literal("sha256"),
  objects: Type.Array(
    Type.Object({
      oid: Type.String(),
      size: Type.Integer(),
      authenticated: Type.Optional(Type.Boolean()),
      actions: Type.Optional(Type.Object({ upload: Type.Optional(LfsAction), download: Type.Optional(LfsAction) })),
      error: Type.Optional(Type.Object({ code: Type.Integer(), message: Type.String() })),
    }),
  ),
});
export type LfsBatchAnswer = Static<typeof LfsBatchAnswer>;

/** The token operation (`GET /api/{type}s/{ns}/{name}/{cas|xet}-{read|write}-token/{rev}`): a CAS token for the CAS at `casUrl` until `exp` (unix seconds). */
export const CasTokenAnswer = Type.Object({ accessToken: Type.String(), exp: Type.Integer(), casUrl: Type.String() }, { additionalProperties: false });
export type CasTokenAnswer = Static<typeof CasTokenAnswer>;

// --- castor's own routes (/api/castor/…, /api/stats) ---------------------------------------------

/** `GET /api/castor/me`. */
export const Me = Type.Object({
  anonymous: Type.Boolean(),
  admin: Type.Boolean(),
  id: Type.Optional(Type.String()),
  user: Type.Optional(Nullable(Type.String())),
  access: Type.Optional(Type.Union([Type.Literal("read"), Type.Literal("write")])),
});
export type Me = Static<typeof Me>;

/** `GET /api/castor/repos/{type}s/{ns}/{name}/storage`: files and logical bytes; the rest for admin tokens. */
export const RepoStorage = Type.Object({
  files: Type.Integer(),
  logicalBytes: Type.Integer(),
  storedBytes: Type.Optional(Type.Integer()),
  uniqueBytes: Type.Optional(Type.Integer()),
  xorbs: Type.Optional(Type.Integer()),
  chunks: Type.Optional(Type.Integer()),
  inlineBlobs: Type.Optional(Type.Integer()),
  inlineBytes: Type.Optional(Type.Integer()),
  dedupRatio: Type.Optional(Nullable(Type.Number())),
  compressionRatio: Type.Optional(Nullable(Type.Number())),
});

/** The signed link (a path below the server, with its query) and when it stops working. */
export const DownloadLink = Type.Object({ url: Type.String(), expiresAt: Type.String() });
export type DownloadLink = Static<typeof DownloadLink>;
export type RepoStorage = Static<typeof RepoStorage>;

/** What live content holds and needs (hub/stats.ts defines each figure): bytes are exact integers. */
const StorageFigures = {
  files: Type.Integer(),
  logicalBytes: Type.Integer(),
  storedBytes: Type.Integer(),
  /** The distinct content before compression. */
  uniqueBytes: Type.Integer(),
  xorbs: Type.Integer(),
  chunks: Type.Integer(),
  inlineBlobs: Type.Integer(),
  inlineBytes: Type.Integer(),
  /** logical / unique bytes (what deduplication saves); null when there is nothing. */
  dedupRatio: Nullable(Type.Number()),
  /** unique / stored bytes (what compression saves); null when nothing is stored. */
  compressionRatio: Nullable(Type.Number()),
};

/** The store's totals: its live content, every recorded xorb, and what a collection could reclaim. */
const StorageTotalsFields = {
  repositories: Type.Integer(),
  ...StorageFigures,
  recordedXorbs: Type.Integer(),
  recordedXorbBytes: Type.Integer(),
  recordedChunks: Type.Integer(),
  unreferencedXorbBytes: Type.Integer(),
};

/** `GET /api/stats` (and `castor stats --json`): the totals, each repository's live content, and the daily samples, oldest first. */
export const StorageStatsAnswer = Type.Object({
  takenAt: Type.String(),
  totals: Type.Object(StorageTotalsFields),
  repositories: Type.Array(
    Type.Object({ type: Type.Union([Type.Literal("model"), Type.Literal("dataset"), Type.Literal("space")]), name: Type.String(), ...StorageFigures }),
  ),
  /** `uniqueBytes` is null in samples recorded before castor measured it. */
  history: Type.Array(Type.Object({ day: Type.String(), takenAt: Type.String(), ...StorageTotalsFields, uniqueBytes: Nullable(Type.Integer()) })),
});
export type StorageStatsAnswer = Static<typeof StorageStatsAnswer>;

/** `GET /api/castor/sharing`. */
export const Sharing = Type.Object({
  path: Type.String(),
  size: Type.Integer(),
  xet: Type.Boolean(),
  chunks: Type.Integer(),
  bytes: Type.Integer(),
  sharedChunks: Type.Integer(),
  sharedBytes: Type.Integer(),
  otherFiles: Type.Integer(),
  repositories: Type.Array(Type.String()),
});
export type Sharing = Static<typeof Sharing>;

/** A hub token as the admin page lists it: never its secret (not stored) nor its hash. */
export const TokenInfo = Type.Object({
  id: Type.String(),
  owner: Nullable(Type.String()),
  access: Type.Union([Type.Literal("read"), Type.Literal("write")]),
  repos: Type.Union([Type.Literal("all"), Type.Array(Type.String())]),
  namespaces: Type.Array(Type.String()),
  state: Type.Union([Type.Literal("active"), Type.Literal("revoked"), Type.Literal("expired")]),
  createdAt: Type.String(),
  expiresAt: Nullable(Type.String()),
  revokedAt: Nullable(Type.String()),
});
export type TokenInfo = Static<typeof TokenInfo>;

export const TokenList = Type.Array(TokenInfo);

/** `POST /api/castor/tokens`: the secret, shown this once. */
export const CreatedToken = Type.Object({ secret: Type.String(), token: TokenInfo });
export type CreatedToken = Static<typeof CreatedToken>;

/** `GET /api/castor/maintenance`: the last gc and fsck runs. */
export const MaintenanceRun = Type.Object({
  kind: Type.Union([Type.Literal("gc"), Type.Literal("fsck")]),
  startedAt: Type.String(),
  finishedAt: Type.String(),
  totals: Type.Record(Type.String(), Type.Number()),
});
export type MaintenanceRun = Static<typeof MaintenanceRun>;

export const MaintenanceRuns = Type.Array(MaintenanceRun);

/** `GET /api/castor/mirror`: what the mirror of an upstream hub holds and saved (the upstream null: castor mirrors none). */
export const MirrorStatus = Type.Object({
  upstream: Nullable(Type.String()),
  /** Mirrored files castor holds, and their bytes. */
  files: Type.Optional(Type.Integer()),
  bytes: Type.Optional(Type.Integer()),
  /** What fetching them cost upstream (less than their bytes when chunks were held already). */
  fetchedBytes: Type.Optional(Type.Integer()),
  /** Bytes of mirrored files this process served since it started. */
  servedBytes: Type.Optional(Type.Integer()),
});
export type MirrorStatus = Static<typeof MirrorStatus>;

/** The hub's error answer. */
export const ErrorBody = Type.Object({ error: Type.String() });
export type ErrorBody = Static<typeof ErrorBody>;
