import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { HIGH_ENTROPY_RULE, createScrubber, isHighEntropySecret, secretsFromEnv, shannonEntropy } from '../src/scrub/index.ts';
import { ALPHABET, createRandom, lookAlikes, secretSamples } from './helpers/secret-corpus.ts';

const scrubber = createScrubber();
const samples = secretSamples();
const keep = lookAlikes();

describe('the scrubber on a corpus of real secret formats', () => {
  it('covers at least 40 formats and 40 look-alikes', () => {
    expect(samples.length).toBeGreaterThanOrEqual(40);
    expect(new Set(samples.map((sample) => sample.name)).size).toBe(samples.length);
    expect(keep.length).toBeGreaterThanOrEqual(40);
  });

  it.each(samples.map((sample) => [sample.name, sample] as const))('redacts a %s', async (_name, sample) => {
    const scrubbed = await scrubber.scrub(sample.text);
    for (const secret of sample.secrets) expect(scrubbed).not.toContain(secret);
    expect(scrubbed).toMatch(/\[REDACTED:[a-z0-9-]+\]/);
  });

  // The formats the fast pass has rules for, so that a log line loses them too.
  const fastFormats = new Set([
    'NATS user nkey seed',
    'NATS account nkey seed',
    'NATS .creds file',
    'Rails SECRET_KEY_BASE',
    'Django SECRET_KEY',
    'secretKey in YAML, unquoted hex',
    'Letters-only password in YAML',
    'PGPASSWORD of letters',
    'Letters-only client secret',
    'ADO.NET connection string password',
    '--password flag of letters',
    'mysql -p with the password glued',
    'AWS STS session token of 1,100 characters (JSON)',
    'URL password with a raw @ and #',
    'GitHub token authorization scheme',
  ]);
  it.each(samples.filter((sample) => fastFormats.has(sample.name)).map((sample) => [sample.name, sample] as const))(
    'redacts a %s in the fast pass alone, in a log line too',
    (_name, sample) => {
      const scrubbed = scrubber.scrubSync(sample.text);
      const line = scrubber.scrubJsonLine(`${JSON.stringify({ msg: sample.text })}\n`);
      for (const secret of sample.secrets) {
        expect(scrubbed).not.toContain(secret);
        expect(line).not.toContain(JSON.stringify(secret).slice(1, -1));
      }
    },
  );

  it.each(keep)('keeps %j verbatim', async (text) => {
    expect(await scrubber.scrub(text)).toBe(text);
  });

  it('names the rule that found each secret in its marker', async () => {
    const random = createRandom(7);
    const github = `ghp_${random.from(ALPHABET.base62, 36)}`;
    const unlabelled = random.from(ALPHABET.base62, 40);
    const text = `token ${github}\nDATABASE_URL=postgres://app:${random.from(ALPHABET.base62, 16)}@db:5432/app\ncookie ${unlabelled}`;
    expect(await scrubber.scrub(text)).toBe(
      'token [REDACTED:github]\nDATABASE_URL=[REDACTED:database-connection-string]\ncookie [REDACTED:high-entropy]',
    );
  });

  it('finds with secretlint what the fast pass alone does not (a Shopify token is hex)', async () => {
    const token = `shpat_${createRandom(8).from(ALPHABET.hex, 32)}`;
    expect(scrubber.scrubSync(`shopify ${token}`)).toBe(`shopify ${token}`);
    expect(await scrubber.scrub(`shopify ${token}`)).toBe('shopify [REDACTED:shopify]');
  });

  it('does not let a secretlint-disable comment in the text switch scrubbing off', async () => {
    const token = `shpat_${createRandom(9).from(ALPHABET.hex, 32)}`;
    const text = `// secretlint-disable\nshopify ${token}\n`;
    expect(await scrubber.scrub(text)).toBe('// secretlint-disable\nshopify [REDACTED:shopify]\n');
  });

  it('redacts configured secrets wherever they occur, and ignores ones too short to be keys', async () => {
    const configured = createScrubber({ secrets: ['plain-words-key', 'abc', undefined] });
    expect(await configured.scrub('the key is plain-words-key; abc stays')).toBe('the key is [REDACTED:configured-secret]; abc stays');
    expect(configured.scrubSync('xplain-words-keyx')).toBe('x[REDACTED:configured-secret]x');
  });

  it('takes the secrets of a process from the variables whose names say so', () => {
    const env = { OPENAI_API_KEY: 'sk-env-key-123456', NATS_PASSWORD: 'hunter22', NATS_KEY: '/etc/nats/key.pem', GITHUB_TOKEN: 'ghp_x', HOME: '/root' };
    expect(secretsFromEnv(env).sort()).toEqual(['hunter22', 'sk-env-key-123456']);
  });
});

describe('the scrubber on adversarial input', () => {
  const size = 1 << 20;
  const fill = (unit: string) => unit.repeat(Math.ceil(size / unit.length)).slice(0, size);
  const inputs: Record<string, string> = {
    'an unclosed quoted value': `password:"${fill('x')}`,
    'quoted values of both kinds interleaved': fill(`token:'a token:"b `),
    'secret-named keys with nothing after them': fill('secret:\n'),
    'spaces after a secret-named key': `password${' '.repeat(size)}x`,
    'a URL whose password is all at signs': `postgres://a:${fill('@')}`,
    'URL credentials back to back': `postgres://${fill('a:b@')}`,
    'mysql commands with no -p': fill('mysql '),
    'authorization headers with no credential': fill('Authorization: token '),
    'seed blocks with no end': fill('-----BEGIN USER NKEY SEED-----'),
    'certificate blocks with no end': fill('-----BEGIN CERTIFICATE-----\nAAAA'),
    'base32 with seed prefixes': fill('SUABCDEFGHIJKLMNOPQRSTUVWXYZ234567'),
    'one path of many random segments': fill('/aB3xY9qLmN2pQ7rT4vWz'),
    'one id of many short random parts': fill('-aB3xY9'),
    'dashes before a BEGIN': `${fill('-')}-----BEGIN X`,
  };

  it.each(Object.entries(inputs))('scrubs 1 MiB of %s in linear time', async (_name, text) => {
    const line = `${JSON.stringify({ msg: text })}\n`;
    const started = performance.now();
    scrubber.scrubSync(text);
    scrubber.scrubJsonLine(line);
    await scrubber.scrub(text);
    // Measured at 20–200 ms on 2 shared cores; a quadratic pattern would take minutes.
    expect(performance.now() - started).toBeLessThan(3000);
  });
});

describe('the high-entropy rule', () => {
  const random = createRandom(11);

  it('measures Shannon entropy in bits per character', () => {
    expect(shannonEntropy('')).toBe(0);
    expect(shannonEntropy('aaaa')).toBe(0);
    expect(shannonEntropy('abcd')).toBe(2);
    expect(shannonEntropy('aabb')).toBe(1);
  });

  it('flags random tokens of mixed classes from 24 to 512 characters', () => {
    expect(isHighEntropySecret(random.from(ALPHABET.base62, 24).replace(/^./, 'aB3'))).toBe(true);
    expect(isHighEntropySecret(`${random.from(ALPHABET.base62, 509)}aB3`)).toBe(true);
    expect(isHighEntropySecret(`${random.from(ALPHABET.base64, 88)}==`)).toBe(true);
  });

  it('keeps tokens outside the length bounds', () => {
    expect(isHighEntropySecret(`aB3${random.from(ALPHABET.base62, HIGH_ENTROPY_RULE.minLength - 4)}`)).toBe(false);
    expect(isHighEntropySecret(`aB3${random.from(ALPHABET.base62, HIGH_ENTROPY_RULE.maxLength)}`)).toBe(false);
  });

  it('keeps tokens whose classes are not mixed: no digit, no capital, no lowercase', () => {
    expect(isHighEntropySecret(random.from(ALPHABET.base62.replace(/[0-9]/g, ''), 40))).toBe(false);
    expect(isHighEntropySecret(random.from(ALPHABET.lowerDigits, 40))).toBe(false);
    expect(isHighEntropySecret(random.from(ALPHABET.upperDigits, 40))).toBe(false);
  });

  it('keeps hex of any case, integrity digests, provider object ids, identifiers and low-entropy runs', () => {
    expect(isHighEntropySecret(`call_${random.from(ALPHABET.base62, 24)}`)).toBe(false);
    expect(isHighEntropySecret(`toolu_01${random.from(ALPHABET.base62, 22)}`)).toBe(false);
    expect(isHighEntropySecret(`${random.from('0123456789abcdefABCDEF', 64)}`)).toBe(false);
    expect(isHighEntropySecret(`sha512-${random.from(ALPHABET.base64, 86)}==`)).toBe(false);
    expect(isHighEntropySecret('handleOAuth2CallbackForTenant')).toBe(false);
    expect(isHighEntropySecret('aB3aB3aB3aB3aB3aB3aB3aB3aB3aB3')).toBe(false);
  });
});

describe('the fast pass over a JSON log line', () => {
  const random = createRandom(12);
  const fastSecrets = [
    `ghp_${random.from(ALPHABET.base62, 36)}`,
    `xoxb-${random.from('0123456789', 12)}-${random.from(ALPHABET.base62, 24)}`,
    `sk_live_${random.from(ALPHABET.base62, 24)}`,
    `AKIA${random.from(ALPHABET.upperDigits, 16)}`,
    random.from(ALPHABET.base62, 32).replace(/^.../, 'aB3'),
  ];
  const separators = [' ', '\n', '\t', '"', '\\', ': ', '=', '\u0001', 'é '];

  it('keeps the line valid JSON and removes the secret, wherever escapes fall around it', () => {
    fc.assert(
      fc.property(
        fc.string({ unit: 'binary', maxLength: 40 }),
        fc.constantFrom(...separators),
        fc.constantFrom(...fastSecrets),
        fc.constantFrom(...separators),
        fc.string({ unit: 'binary', maxLength: 40 }),
        (before, left, secret, right, after) => {
          const message = `${before}${left}${secret}${right}${after}`;
          const line = `${JSON.stringify({ level: 30, msg: message, nested: { detail: message } })}\n`;
          const scrubbed = scrubber.scrubJsonLine(line);
          const parsed = JSON.parse(scrubbed) as { msg: string; nested: { detail: string } };
          expect(parsed.msg).not.toContain(secret);
          expect(parsed.nested.detail).not.toContain(secret);
        },
      ),
      { numRuns: 400 },
    );
  });

  it('never breaks a line, whatever text it carries', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 300 }), (text) => {
        const line = `${JSON.stringify({ msg: text, password: text })}\n`;
        expect(() => JSON.parse(scrubber.scrubJsonLine(line))).not.toThrow();
      }),
      { numRuns: 400 },
    );
  });

  it('never breaks a line whose secret-named fields hold numbers, booleans or null', () => {
    const withDigits = createScrubber({ secrets: ['12345678', '4242.4242'] });
    const key = fc.constantFrom('token', 'password', 'secret', 'prompt_token', 'accessKey', 'api_key', 'SECRET_KEY', 'msg');
    const value = fc.oneof(
      fc.integer({ min: Number.MIN_SAFE_INTEGER, max: Number.MAX_SAFE_INTEGER }),
      fc.double(),
      fc.constantFrom(12345678, 912345678901, -12345678, 4242.4242, 1.5e21, 0, true, false, null),
      fc.boolean(),
      fc.constant(null),
      fc.string({ maxLength: 20 }),
    );
    fc.assert(
      fc.property(fc.dictionary(key, fc.oneof(value, fc.array(value, { maxLength: 3 }), fc.dictionary(key, value))), (fields) => {
        const line = `${JSON.stringify({ level: 30, ...fields })}\n`;
        for (const each of [scrubber, withDigits]) expect(() => JSON.parse(each.scrubJsonLine(line))).not.toThrow();
      }),
      { numRuns: 600 },
    );
  });

  it('writes a secret number as a marker string and keeps counts, signed numbers and fractions', () => {
    const line = `${JSON.stringify({ token: 1234567890, password: 12345678, secret: -1234567, prompt_token: 123456, config: { accessKey: 1.5e21 } })}\n`;
    expect(JSON.parse(scrubber.scrubJsonLine(line))).toEqual({
      token: '[REDACTED:secret-assignment]',
      password: '[REDACTED:secret-assignment]',
      secret: -1234567,
      prompt_token: 123456,
      config: { accessKey: 1.5e21 },
    });
  });

  it('redacts the whole number that holds a configured secret made of digits', () => {
    const withDigits = createScrubber({ secrets: ['12345678'] });
    const line = `${JSON.stringify({ time: 1795612345678, pid: 12345678, msg: 'pin 12345678' })}\n`;
    expect(JSON.parse(withDigits.scrubJsonLine(line))).toEqual({
      time: '[REDACTED:configured-secret]',
      pid: '[REDACTED:configured-secret]',
      msg: 'pin [REDACTED:configured-secret]',
    });
  });

  it('redacts a PEM key logged with its newlines escaped, and a secret-named field', () => {
    const key = `-----BEGIN PRIVATE KEY-----\n${random.from(ALPHABET.base64, 64)}\n-----END PRIVATE KEY-----`;
    const line = `${JSON.stringify({ msg: `loaded ${key} ok`, config: { db_password: 'hunter2!' } })}\n`;
    expect(JSON.parse(scrubber.scrubJsonLine(line))).toEqual({ msg: 'loaded [REDACTED:private-key] ok', config: { db_password: '[REDACTED:secret-assignment]' } });
  });
});
