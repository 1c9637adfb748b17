/**
 * Repository types, as hub paths (`/api/{type}s/…`), CAS tokens and repository references
 * (`TYPE:NAMESPACE/NAME`) name them. Here so that the server's records and the client share
 * one definition (the client may import only the format layer).
 */
export const REPO_TYPES = ["model", "dataset", "space"] as const;
export type RepoType = (typeof REPO_TYPES)[number];
