/**
 * `@agent-inbox/client` for Node 20+: the core, with a JSON state file and fetch-read event
 * streams (bearer header) as the default platform.
 */

import { setDefaultPlatform } from "./agent.js";
import { nodePlatform } from "./platform-node.js";

export * from "./core.js";
export { JsonFileState, nodePlatform, openFetchStream } from "./platform-node.js";

setDefaultPlatform(() => nodePlatform());
