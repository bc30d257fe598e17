// The official A2A JavaScript SDK (@a2a-js/sdk) as a client of an agent's A2A face, one call per
// run, for test_a2a.py: `node client.mjs COMMAND BASE_URL TOKEN [ARGS...]`. BASE_URL is the
// agent's (`.../a2a/{tenant}/{agent}/`); the card is resolved from it as the SDK does. Answers
// are ProtoJSON on stdout, one line each (a stream's events as they come); a refusal is
// {"error": {...}} and exit code 1.
//
//   send ID TEXT            SendMessage (returnImmediately), the task
//   stream ID TEXT          SendStreamingMessage, each event
//   subscribe TASK [AFTER]  SubscribeToTask (resuming after the event id AFTER), each event
//   get TASK | list | cancel TASK

import { ClientFactory, ClientFactoryOptions, JsonRpcTransportFactory } from '@a2a-js/sdk/client';
import { ListTasksResponse, StreamResponse, Task } from '@a2a-js/sdk';

const [command, base, token, ...args] = process.argv.slice(2);
const fetchImpl = (url, init = {}) =>
  fetch(url, { ...init, headers: { ...(init.headers ?? {}), Authorization: `Bearer ${token}` } });
const factory = new ClientFactory(
  ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    transports: [new JsonRpcTransportFactory({ fetchImpl })],
  }),
);

const print = (value) => process.stdout.write(JSON.stringify(value) + '\n');
const message = (id, text) => ({ messageId: id, role: 1, parts: [{ content: { $case: 'text', value: text } }] });

try {
  const client = await factory.createFromUrl(base);
  switch (command) {
    case 'send':
      print(Task.toJSON(await client.sendMessage({ message: message(args[0], args[1]), configuration: { returnImmediately: true } })));
      break;
    case 'stream':
      for await (const event of client.sendMessageStream({ message: message(args[0], args[1]) })) {
        print(StreamResponse.toJSON(event));
      }
      break;
    case 'subscribe': {
      const options = args[1] ? { serviceParameters: { 'Last-Event-ID': args[1] } } : undefined;
      for await (const event of client.resubscribeTask({ id: args[0] }, options)) {
        print(StreamResponse.toJSON(event));
      }
      break;
    }
    case 'get':
      print(Task.toJSON(await client.getTask({ id: args[0] })));
      break;
    case 'list':
      print(ListTasksResponse.toJSON(await client.listTasks({ includeArtifacts: true })));
      break;
    case 'cancel':
      print(Task.toJSON(await client.cancelTask({ id: args[0] })));
      break;
    default:
      throw new Error(`unknown command ${command}`);
  }
} catch (error) {
  const cause = error?.cause ?? error;
  print({ error: { name: cause?.constructor?.name ?? 'Error', message: String(cause?.message ?? cause), code: cause?.code } });
  process.exit(1);
}
