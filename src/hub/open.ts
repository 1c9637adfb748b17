/** Short-lived hub access for the admin commands: open the configured store, use it, close it. */
import type { CastorConfig } from "../config.js";
import { openMetadataStore } from "../metadata/open.js";
import { HubService } from "./service.js";

export async function withHub<T>(config: CastorConfig, use: (hub: HubService) => Promise<T>): Promise<T> {
  const store = await openMetadataStore(config);
  try {
    return await use(new HubService(store));
  } finally {
    await store.close();
  }
}
