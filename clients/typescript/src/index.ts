/**
 * `@agent-inbox/client` for browsers: the core, with IndexedDB state, EventSource streams
 * (ticket or cookie), Web Locks leader election and BroadcastChannel hints as the default
 * platform.
 */

import { setDefaultPlatform } from "./agent.js";
import { browserPlatform } from "./platform-browser.js";

export * from "./core.js";
export { IndexedDbState, browserPlatform, browserTabs, openEventSource, watchBrowserLifecycle } from "./platform-browser.js";

setDefaultPlatform(() => browserPlatform());
