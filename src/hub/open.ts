/** Short-lived hub access for the admin commands: open the configured metadata store, use it, close it. */
import type { CastorConfig } from "../config.js";
import { openMetadataStore } from "../metadata/open.js";
import { createAdminHub, type AdminHub } from "./index.js";

export async function withHub<T>(config: CastorConfig, use: (hub: AdminHub) => Promise<T>): Promise<T> {
  const store = await openMetadataStore(config);
  try {
    return await use(createAdminHub(store));
  } finally {
    await store.close();
  }
}
