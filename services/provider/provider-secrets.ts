import { headerSecrets } from '../../src/scrub/index.ts';

/**
 * The configured secrets of one provider, for its scrubber: the API key, and the credentials of the headers
 * configured for it (a gateway's key; {@link headerSecrets}).
 *
 * @example
 * providerSecrets('sk-…', { Authorization: 'Bearer gw-123456', 'X-Team': 'ml' }); // ['sk-…', 'Bearer gw-123456', 'gw-123456']
 */
export function providerSecrets(apiKey: string | undefined, headers: Readonly<Record<string, string>> | undefined): string[] {
  return [...(apiKey ? [apiKey] : []), ...headerSecrets(headers)];
}
