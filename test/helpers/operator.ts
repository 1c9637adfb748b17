/**
 * The hub's services as the admin commands call them (as the operator), in the short form tests
 * set up repositories, revisions and tokens with: `hub.createRepo("model", "alice/bert")`.
 */
import { createAdminHub, OPERATOR, parseRepoRef, type AdminHub, type CreateTokenOptions, type TokenRequest } from "../../src/hub/index.js";
import type { MetadataStore, RevisionKind } from "../../src/metadata/store.js";

export class OperatorHub {
  private readonly hub: AdminHub;

  /** Over a metadata store, or the services the admin commands got (`withHub`). */
  constructor(storeOrHub: MetadataStore | AdminHub, now?: () => Date) {
    this.hub = "tokens" in storeOrHub ? storeOrHub : createAdminHub(storeOrHub, now);
  }

  async createRepo(type: string, name: string, options: { private?: boolean } = {}) {
    return this.hub.repos.create(OPERATOR, type, name, options);
  }

  async listRepos() {
    return (await this.hub.repos.list(OPERATOR)).repos;
  }

  async createRevision(repoRef: string, name: string, kind: RevisionKind) {
    return this.hub.repos.createRevision(OPERATOR, parseRepoRef(repoRef), name, kind);
  }

  async createToken(options: CreateTokenOptions) {
    return this.hub.tokens.create(OPERATOR, options);
  }

  listTokens() {
    return this.hub.tokens.list(OPERATOR);
  }

  revokeToken(id: string) {
    return this.hub.tokens.revoke(OPERATOR, id);
  }

  authorizeTokenRequest(request: TokenRequest) {
    return this.hub.tokens.authorizeTokenRequest(request);
  }
}
