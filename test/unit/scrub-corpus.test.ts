import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { HIGH_ENTROPY_RULE, createScrubber, isHighEntropySecret, secretsFromEnv, shannonEntropy } from '../../src/scrub/index.ts';
import { ALPHABET, createRandom, lookAlikes, secretSamples } from '../helpers/secret-corpus.ts';

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
    'SendGrid API key, both parts (1)',
    'SendGrid API key, both parts (2)',
    'DigitalOcean personal access token',
    'DigitalOcean OAuth token',
    'DigitalOcean refresh token',
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

  it('keeps the key and the quotes of an assignment secretlint reports whole, so a JSON file stays JSON', async () => {
    const key = createRandom(10).from(ALPHABET.base64, 40);
    const json = JSON.stringify({ Credentials: { AccessKeyId: 'x', SecretAccessKey: key } });
    expect(JSON.parse(await scrubber.scrub(json))).toEqual({ Credentials: { AccessKeyId: 'x', SecretAccessKey: '[REDACTED:aws]' } });
    expect(await scrubber.scrub(`aws_secret_access_key = ${key}\n`)).toBe('aws_secret_access_key = [REDACTED:aws]\n');
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
    'SendGrid prefixes with nothing after them': fill('SG.aaaaaaaaaaaaaaaaaaaaaa.'),
    'DigitalOcean prefixes with short hex': fill('dop_v1_0123456789abcdef'),
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

  it('keeps an id too short to count with a serial number after it (a NUID-named consumer, <nuid>_1), not a longer token so ended', () => {
    const nuid = `aB3${random.from(ALPHABET.base62, 19)}`;
    expect(isHighEntropySecret(`${nuid}_1`)).toBe(false);
    expect(isHighEntropySecret(`${nuid}-12`)).toBe(false);
    expect(isHighEntropySecret(`aB3${random.from(ALPHABET.base62, 29)}_1`)).toBe(true);
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

  it('keeps Stripe object ids but not Stripe keys nor a payment intent client secret', () => {
    for (const prefix of ['pi', 'ch', 'evt', 'cus']) expect(isHighEntropySecret(`${prefix}_3Mt${random.from(ALPHABET.base62, 21)}`)).toBe(false);
    expect(isHighEntropySecret(`pi_3Mt${random.from(ALPHABET.base62, 21)}_secret_${random.from(ALPHABET.base62, 25)}`)).toBe(true);
    expect(isHighEntropySecret(`sk_live_3Mt${random.from(ALPHABET.base62, 24)}`)).toBe(true);
    expect(isHighEntropySecret(`rk_live_3Mt${random.from(ALPHABET.base62, 24)}`)).toBe(true);
  });

  it('keeps an SSH public key blob of any key type, but not a private key of the same alphabet', () => {
    const blob = (type: string) => Buffer.concat([Buffer.from([0, 0, 0, type.length]), Buffer.from(type), Buffer.from(random.from(ALPHABET.base62, 40))]).toString('base64');
    for (const type of ['ssh-ed25519', 'ssh-rsa', 'ecdsa-sha2-nistp384', 'sk-ecdsa-sha2-nistp256@openssh.com', 'ssh-ed25519-cert-v01@openssh.com']) {
      expect(isHighEntropySecret(blob(type))).toBe(false);
    }
    expect(isHighEntropySecret(Buffer.from(`openssh-key-v1\0${random.from(ALPHABET.base62, 40)}`).toString('base64'))).toBe(true);
    expect(isHighEntropySecret(`AAAA${random.from(ALPHABET.base64, 40)}`)).toBe(true);
  });

  it('keeps hyphen-joined ids of short parts, and still flags base64url secrets with hyphens in them', () => {
    expect(isHighEntropySecret('agentbus-runtime-7d9f8b6c5-x2k4m-1234-Ab3dEf')).toBe(false);
    expect(isHighEntropySecret('agentbus-authentication-gateway-7d9f8b6c5-x2k4m-1-Zq9XwB')).toBe(false);
    expect(isHighEntropySecret(`${random.from(ALPHABET.base62, 14)}-${random.from(ALPHABET.base62, 14)}-${random.from(ALPHABET.base62, 14)}`)).toBe(true);
    expect(isHighEntropySecret(`aB3${random.from(ALPHABET.base62, 6)}-Xy7${random.from(ALPHABET.base62, 6)}-Qw2${random.from(ALPHABET.base62, 6)}`)).toBe(true);
    let flagged = 0;
    for (let index = 0; index < 2000; index++) if (isHighEntropySecret(random.from(ALPHABET.base64url, 43))) flagged++;
    expect(flagged).toBeGreaterThanOrEqual(1995);
  });
});

describe('the high-entropy rule on paths', () => {
  const random = createRandom(13);

  it('scores the segments of a path alone, so a random one costs that segment only', () => {
    const segment = random.from(ALPHABET.base62, 30);
    expect(scrubber.scrubSync(`ls /var/cache/agentbus/${segment}/index`)).toBe('ls /var/cache/agentbus/[REDACTED:high-entropy]/index');
    expect(scrubber.scrubSync(`./build/${segment}`)).toBe('./build/[REDACTED:high-entropy]');
    expect(scrubber.scrubSync(`~/.cache/${segment}/blob`)).toBe('~/.cache/[REDACTED:high-entropy]/blob');
  });

  it('keeps a random segment that names a file, and scores every other one alone, in a URL\'s path too: a capability URL keeps nothing of its token', () => {
    const segment = random.from(ALPHABET.base62, 30);
    expect(scrubber.scrubSync(`/srv/www/assets/app-${segment}.js`)).toBe(`/srv/www/assets/app-${segment}.js`);
    expect(scrubber.scrubSync(`s3://bucket/exports/${segment}/part-0.json.gz`)).toBe('s3://bucket/exports/[REDACTED:high-entropy]/part-0.json.gz');
    expect(scrubber.scrubSync(`https://api.example.com/v1/hooks/${segment}/events`)).toBe('https://api.example.com/v1/hooks/[REDACTED:high-entropy]/events');
    expect(scrubber.scrubSync(`https://files.example.com/share/${segment}/download`)).toBe('https://files.example.com/share/[REDACTED:high-entropy]/download');
    expect(scrubber.scrubSync(`https://hooks.example.com/services/${segment}`)).toBe('https://hooks.example.com/services/[REDACTED:high-entropy]');
    expect(scrubber.scrubSync(`https://example.com/login?next=/account/keys/${segment}/edit`)).toBe('https://example.com/login?next=/account/keys/[REDACTED:high-entropy]/edit');
  });

  it('does not read random base64 as a path, however its slashes fall', () => {
    let leaked = 0;
    for (let index = 0; index < 5000; index++) {
      const secret = index % 2 === 0 ? random.from(ALPHABET.base64, 40) : `/${random.from(ALPHABET.base64, 39)}`;
      if (!isHighEntropySecret(secret)) continue;
      if (scrubber.scrubSync(`key ${secret} end`) === `key ${secret} end`) leaked++;
    }
    expect(leaked).toBe(0);
  });
});

describe('the high-entropy rule on public material', () => {
  const random = createRandom(14);

  it('keeps the bodies of certificates and public keys, in a JSON log line too, but not a private key beside them', () => {
    const line = (label: string) => `-----BEGIN ${label}-----\n${Array.from({ length: 4 }, () => random.from(ALPHABET.base64, 64)).join('\n')}\n-----END ${label}-----`;
    const certificate = line('CERTIFICATE');
    const publicKey = line('PUBLIC KEY');
    expect(scrubber.scrubSync(`${certificate}\n${publicKey}`)).toBe(`${certificate}\n${publicKey}`);
    const logLine = `${JSON.stringify({ msg: 'loaded', ca: certificate })}\n`;
    expect(scrubber.scrubJsonLine(logLine)).toBe(logLine);
    const unlabelled = random.from(ALPHABET.base62, 40);
    expect(scrubber.scrubSync(`${certificate}\n${unlabelled}`)).toBe(`${certificate}\n[REDACTED:high-entropy]`);
  });

  it('scores a certificate block whose body holds anything but base64', () => {
    const secret = random.from(ALPHABET.base62, 40);
    const text = `-----BEGIN CERTIFICATE-----\ntoken: ${secret}\n-----END CERTIFICATE-----`;
    expect(scrubber.scrubSync(text)).not.toContain(secret);
  });
});

describe('the runtime\'s node ids', () => {
  // Kubernetes' alphabet for ReplicaSet hashes and pod suffixes.
  const KUBERNETES = 'bcdfghjklmnpqrstvwxz2456789';

  it('are kept in log lines when built on Deployment pod names, a few hundred of them', () => {
    const random = createRandom(15);
    const deployments = ['agentbus-runtime', 'agentbus-notification-dispatcher', 'rt', 'acme-prod-agent-runtime-v2'];
    for (let index = 0; index < 400; index++) {
      const deployment = deployments[index % deployments.length]!;
      const host = `${deployment}-${random.from(KUBERNETES, 10)}-${random.from(KUBERNETES, 5)}`.slice(0, 32);
      const nodeId = `${host}-${1 + Math.floor(random.next() * 4_000_000)}-${random.from(ALPHABET.base62, 6)}`;
      const line = `${JSON.stringify({ level: 30, nodeId, msg: `lease renewed by ${nodeId}` })}\n`;
      expect(scrubber.scrubJsonLine(line)).toBe(line);
    }
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

describe('the full pass over a JSON value (a tool call\'s arguments)', () => {
  const random = createRandom(16);

  it('scrubs every string, nested too, and a secret named by its key, keeping the shape and the rest', async () => {
    const bearer = `sk-live-${random.from(ALPHABET.base62, 32)}`;
    const shopify = `shpat_${random.from(ALPHABET.hex, 32)}`;
    const args = {
      cmd: `curl -H 'Authorization: Bearer ${bearer}' https://api.example.com`,
      env: [{ name: 'SHOPIFY', value: `shopify ${shopify}` }],
      config: { password: 'hunter2!', retries: 3, verbose: true, note: null },
    };
    const { value, redacted } = await scrubber.scrubValue(args);
    expect(redacted).toBe(true);
    expect(value).toEqual({
      cmd: "curl -H 'Authorization: Bearer [REDACTED:api-key]' https://api.example.com",
      env: [{ name: 'SHOPIFY', value: 'shopify [REDACTED:shopify]' }],
      config: { password: '[REDACTED:secret-assignment]', retries: 3, verbose: true, note: null },
    });
    // The value given is left as it was: the call goes out with it.
    expect(args.cmd).toContain(bearer);
  });

  it('gives back the value itself, not redacted, when it holds no secret', async () => {
    const args = { path: 'src/index.ts', lines: [1, 2], recursive: false, glob: '**/*.ts', text: 'We support Bearer authentication.' };
    const scrubbed = await scrubber.scrubValue(args);
    expect(scrubbed).toEqual({ value: args, redacted: false });
    expect(scrubbed.value).toBe(args);
    for (const plain of [undefined, null, 42, 'hello', []]) expect((await scrubber.scrubValue(plain)).redacted).toBe(false);
  });

  it('scrubs a value JSON cannot write (a bigint) string by string', async () => {
    const token = `ghp_${random.from(ALPHABET.base62, 36)}`;
    const { value, redacted } = await scrubber.scrubValue({ id: 12n, token: `use ${token}` });
    expect(redacted).toBe(true);
    expect(value).toEqual({ id: 12n, token: 'use [REDACTED:github]' });
  });
});
