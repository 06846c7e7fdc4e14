import { describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logging.ts';
import { ALPHABET, createRandom } from '../helpers/secret-corpus.ts';

/** A logger at debug whose raw lines are kept, as the destination received them. */
function rawLogger(options: { secrets?: readonly string[] } = {}) {
  const lines: string[] = [];
  const logger = createLogger({ name: 'test', level: 'debug', destination: { write: (line: string) => void lines.push(line) }, ...options });
  return { logger, lines };
}

const random = createRandom(31);
const githubToken = `ghp_${random.from(ALPHABET.base62, 36)}`;
const stripeKey = `sk_live_${random.from(ALPHABET.base62, 24)}`;
const unlabelled = `${random.from(ALPHABET.base62, 37)}aB3`;

describe('a log line', () => {
  it('is scrubbed before it is written: message, fields, nested values, child bindings and error stacks', () => {
    const { logger, lines } = rawLogger();
    const child = logger.child({ origin: `clone of https://x:${githubToken}@github.com/acme/app` });
    const error = new Error(`upstream rejected ${stripeKey}`);
    child.warn({ err: error, request: { headers: { cookie: unlabelled } }, note: `tokens: ${githubToken}` }, `call failed with ${stripeKey}`);

    expect(lines).toHaveLength(1);
    const [line] = lines;
    for (const secret of [githubToken, stripeKey, unlabelled]) expect(line).not.toContain(secret);
    const parsed = JSON.parse(line!) as { msg: string; note: string; err: { message: string; stack: string }; request: { headers: { cookie: string } }; origin: string };
    expect(parsed.msg).toBe('call failed with [REDACTED:stripe]');
    expect(parsed.note).toBe('tokens: [REDACTED:github]');
    expect(parsed.err.message).toBe('upstream rejected [REDACTED:stripe]');
    expect(parsed.err.stack).toContain('Error: upstream rejected [REDACTED:stripe]\n    at ');
    expect(parsed.request.headers.cookie).toBe('[REDACTED:high-entropy]');
    expect(parsed.origin).toContain('[REDACTED:');
  });

  it('loses configured secrets, and keeps the redact paths for keys and authorization headers', () => {
    const { logger, lines } = rawLogger({ secrets: ['correct-horse-battery'] });
    logger.info({ apiKey: 'short', headers: { authorization: 'x' }, user: 'ada' }, 'login with correct-horse-battery');
    expect(JSON.parse(lines[0]!)).toMatchObject({
      msg: 'login with [REDACTED:configured-secret]',
      apiKey: '[REDACTED:log-field]',
      headers: { authorization: '[REDACTED:log-field]' },
      user: 'ada',
    });
  });

  it('stays valid JSON when a secret-named field holds a number, and keeps token counts', () => {
    const { logger, lines } = rawLogger();
    logger.info({ token: 1234567890 }, 'numeric token');
    logger.info({ password: 12345678, secret: -1234567, prompt_token: 123456, config: { accessKey: 1.5e21 } }, 'numbers');
    const [first, second] = lines.map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(first).toMatchObject({ token: '[REDACTED:secret-assignment]', msg: 'numeric token' });
    expect(second).toMatchObject({ password: '[REDACTED:secret-assignment]', secret: -1234567, prompt_token: 123456, config: { accessKey: 1.5e21 } });
  });

  it('keeps ordinary lines byte for byte', () => {
    const { logger, lines } = rawLogger();
    const sessionId = random.from(ALPHABET.base62, 22);
    const node = logger.child({ nodeId: 'agentbus-runtime-7d9f8b6c5-x2k4m-1234-Ab3dEf' });
    node.info({ tenant: 'acme', sessionId, commit: random.from(ALPHABET.hex, 40), path: '/srv/agentbus/services/runtime/toolExecution2Helpers.ts' }, 'turn ended');
    const parsed = JSON.parse(lines[0]!) as Record<string, unknown>;
    expect(lines[0]).toBe(`${JSON.stringify(parsed)}\n`);
    expect(parsed).toMatchObject({ sessionId, nodeId: 'agentbus-runtime-7d9f8b6c5-x2k4m-1234-Ab3dEf', msg: 'turn ended' });
    expect(lines[0]).not.toContain('REDACTED');
  });
});
