/**
 * The records the hub's services take and return, for the transports that call them (which do
 * not import the metadata seam themselves): repositories, revisions, commits, trees, hub tokens.
 */
export type { CommitRecord, HubToken, Repo, RepoType, Revision, RevisionKind, TreeEntry, TreeFileEntry, TreeRecord } from "../metadata/store.js";
export { REPO_TYPES } from "../format/repo.js";
