/** The hub's public surface, for the HTTP layer and the admin commands. */
export { HubService, MAX_REPOS_PER_TOKEN } from "./service.js";
export type { TokenGrant, TokenDenial, TokenRequest, CreateTokenOptions } from "./service.js";
export { HubError } from "./errors.js";
export {
  parseRepoRef,
  formatRepoRef,
  repoNameProblem,
  repoTypeProblem,
  revisionNameProblem,
  MAX_REVISION_NAME_LENGTH,
} from "./names.js";
export { parseExpires, MAX_TOKEN_LIFETIME_MS } from "./expires.js";
export {
  HUB_TOKEN_PREFIX,
  generateHubTokenSecret,
  generateHubTokenId,
  hashHubTokenSecret,
  hubTokenState,
  type HubTokenState,
} from "./tokens.js";
