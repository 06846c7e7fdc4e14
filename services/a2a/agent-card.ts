import { A2A_PROTOCOL_VERSION } from '@a2a-js/sdk';
import type { AgentCard } from '@a2a-js/sdk';
import type { A2aConfig } from './config.ts';

/** Where the JSON-RPC binding is served, under the server's base URL. */
export const JSONRPC_PATH = '/a2a/jsonrpc';
/** The name the card gives the bearer scheme when `AGENTBUS_A2A_TOKEN` is set. */
export const BEARER_SCHEME = 'bearer';

/**
 * The agent card of the A2A server: one JSON-RPC interface announced for A2A 1.0 and for 0.3 (the SDK serves both
 * method sets on the same URL), streaming on, push notifications and the extended card off, text in and out, and —
 * when a token is configured — the HTTP bearer scheme, required on every call.
 */
export function buildAgentCard(config: A2aConfig, baseUrl: string, version: string): AgentCard {
  const url = `${baseUrl.replace(/\/$/, '')}${JSONRPC_PATH}`;
  const secured = config.token !== undefined;
  return {
    name: config.name,
    description: config.description,
    supportedInterfaces: [
      { url, protocolBinding: 'JSONRPC', tenant: '', protocolVersion: A2A_PROTOCOL_VERSION },
      { url, protocolBinding: 'JSONRPC', tenant: '', protocolVersion: '0.3' },
    ],
    provider: undefined,
    version,
    capabilities: { streaming: true, pushNotifications: false, extensions: [], extendedAgentCard: false },
    securitySchemes: secured
      ? { [BEARER_SCHEME]: { scheme: { $case: 'httpAuthSecurityScheme', value: { description: 'AGENTBUS_A2A_TOKEN of the server', scheme: 'Bearer', bearerFormat: '' } } } }
      : {},
    securityRequirements: secured ? [{ schemes: { [BEARER_SCHEME]: { list: [] } } }] : [],
    defaultInputModes: ['text/plain', 'application/json'],
    defaultOutputModes: ['text/plain', 'application/json'],
    skills: [
      {
        id: 'agentbus-session',
        name: 'Conversation',
        description: `Answers in an agentbus session of tenant ${config.tenant}, with the tools its workers serve; the same contextId continues the same session.`,
        tags: ['agentbus', 'chat', 'tools'],
        examples: ['What is in this folder?'],
        inputModes: [],
        outputModes: [],
        securityRequirements: [],
      },
    ],
    signatures: [],
  };
}
