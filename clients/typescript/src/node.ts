/**
 * `@agent-inbox/client` for Node 20+: the core, with a JSON state file and fetch-read event
 * streams (bearer header) as the default platform, and `waitForWork`, which asks the local wake
 * daemon (`agent-inbox daemon`) first.
 */

import { setDefaultPlatform } from "./agent.js";
import { nodePlatform } from "./platform-node.js";

export * from "./core.js";
export { JsonFileState, nodePlatform, openFetchStream } from "./platform-node.js";
export {
  DAEMON_LINE_BYTES_MAX,
  DAEMON_PROTOCOL_VERSION,
  DaemonUnavailable,
  LocalDaemon,
  configHome,
  daemonSocketPath,
  identityOfProfile,
  waitForWork,
} from "./daemon-node.js";
export type { DaemonIdentity, WaitForWorkOptions } from "./daemon-node.js";

setDefaultPlatform(() => nodePlatform());
