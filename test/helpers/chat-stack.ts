import { AbstractChat, DefaultChatTransport } from 'ai';
import type { ChatInit, ChatState, ChatStatus, UIMessage } from 'ai';
import { startServiceProcess } from './service-process.ts';
import type { ServiceProcess } from './service-process.ts';

// What the chat gateway's process tests share: the services it needs started as processes, and a chat client made
// of the AI SDK's own chat logic (AbstractChat, what `useChat` wraps) with its state kept in plain fields.

/** A service of the stack behind the gateway, with the line it logs once ready. */
const READY: Readonly<Record<string, string>> = {
  runtime: 'runtime started',
  provider: 'provider service started',
  tools: 'tools service started',
  memory: 'memory service ready',
};

/** Options of {@link startChatStack}. */
export interface ChatStackOptions {
  /** The services started as processes beside the gateway, each with its extra environment. */
  readonly services: Readonly<Partial<Record<'runtime' | 'provider' | 'tools' | 'memory', Record<string, string>>>>;
  /** Environment every process gets: the bus URL, and credentials when the server asks for them. */
  readonly env: (service: string) => Record<string, string>;
  readonly token: string;
  readonly tenant: string;
}

/** A started stack: its processes (the gateway last) and the gateway's base URL. */
export interface ChatStack {
  readonly processes: readonly ServiceProcess[];
  readonly base: string;
  stop(): Promise<void>;
}

/** Starts the named services and the chat gateway (on a free port) as processes; resolves once all are ready. */
export async function startChatStack(options: ChatStackOptions): Promise<ChatStack> {
  const names = Object.keys(options.services) as Array<keyof ChatStackOptions['services']>;
  const services = names.map((name) => startServiceProcess(`services/${name}/main.ts`, { ...options.env(name), ...options.services[name] }));
  const chat = startServiceProcess('services/chat/main.ts', {
    ...options.env('chat'),
    AGENTBUS_CHAT_TOKEN: options.token,
    AGENTBUS_CHAT_PORT: '0',
    AGENTBUS_CHAT_TENANT: options.tenant,
  });
  const processes = [...services, chat];
  const stop = async () => {
    await Promise.all(processes.map((process) => process.stop('SIGTERM')));
  };
  try {
    await Promise.all([...names.map((name, index) => services[index]!.waitFor(READY[name]!, 60_000)), chat.waitFor('chat gateway started', 60_000)]);
  } catch (error) {
    await stop();
    throw error;
  }
  const base = /chat gateway started on (http:\/\/[\d.:]+)/.exec(chat.output())![1]!;
  return { processes, base, stop };
}

/** The plain state `useChat` keeps in React, kept here in fields. */
class MemoryChatState implements ChatState<UIMessage> {
  status: ChatStatus = 'ready';
  error: Error | undefined = undefined;
  messages: UIMessage[] = [];
  pushMessage = (message: UIMessage) => {
    this.messages = [...this.messages, message];
  };
  popMessage = () => {
    this.messages = this.messages.slice(0, -1);
  };
  replaceMessage = (index: number, message: UIMessage) => {
    this.messages = this.messages.map((current, at) => (at === index ? message : current));
  };
  snapshot = <T,>(thing: T): T => structuredClone(thing);
}

/** A chat as `useChat` runs it, against the gateway at `base`; `memory` shows its messages. */
export class TestChat extends AbstractChat<UIMessage> {
  readonly memory: MemoryChatState;
  constructor(base: string, token: string, id: string, options: Pick<ChatInit<UIMessage>, 'sendAutomaticallyWhen'> = {}) {
    const state = new MemoryChatState();
    super({ id, state, transport: new DefaultChatTransport<UIMessage>({ api: `${base}/api/chat`, headers: { Authorization: `Bearer ${token}` } }), ...options });
    this.memory = state;
  }
}
