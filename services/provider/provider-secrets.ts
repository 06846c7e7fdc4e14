/** Header names whose values are credentials (`Authorization`, `X-API-Key`, `Cookie`, a gateway's `X-Auth-Token`, …). */
const CREDENTIAL_HEADER = /auth|key|token|secret|passw|cookie|session|credential/i;

/**
 * The configured secrets of one provider, for its scrubber: the API key, and the values of the headers configured
 * for it whose names say they carry credentials (a gateway's key). A value with a scheme (`Bearer abc…`) is also
 * taken without it, as it appears in an error text that quotes only the token.
 *
 * @example
 * providerSecrets('sk-…', { Authorization: 'Bearer gw-123456', 'X-Team': 'ml' }); // ['sk-…', 'Bearer gw-123456', 'gw-123456']
 */
export function providerSecrets(apiKey: string | undefined, headers: Readonly<Record<string, string>> | undefined): string[] {
  const secrets = apiKey ? [apiKey] : [];
  for (const [name, value] of Object.entries(headers ?? {})) {
    if (!CREDENTIAL_HEADER.test(name)) continue;
    secrets.push(value);
    const token = value.trim().split(/\s+/).at(-1);
    if (token && token !== value) secrets.push(token);
  }
  return secrets;
}
