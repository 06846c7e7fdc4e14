/**
 * A corpus for the scrubber: real secret formats with fake values (right prefixes, lengths and alphabets,
 * drawn from a seeded generator, so a failure reproduces) and look-alikes that must survive verbatim.
 * No value here was ever a live credential.
 */

/** A seeded generator of random strings (mulberry32). */
export function createRandom(seed: number) {
  let state = seed >>> 0;
  const next = () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const from = (alphabet: string, length: number) => Array.from({ length }, () => alphabet[Math.floor(next() * alphabet.length)]).join('');
  return { next, from };
}

const UPPER = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ';
const LOWER = 'abcdefghijklmnopqrstuvwxyz';
const DIGITS = '0123456789';
export const ALPHABET = {
  upperDigits: UPPER + DIGITS,
  base62: UPPER + LOWER + DIGITS,
  base64: `${UPPER}${LOWER}${DIGITS}+/`,
  base64url: `${UPPER}${LOWER}${DIGITS}-_`,
  hex: '0123456789abcdef',
  base32: 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567',
  lowerDigits: LOWER + DIGITS,
} as const;

/** One secret format: `text` is how it appears in a tool output or an error; `secrets` are the parts that must go. */
export interface SecretSample {
  readonly name: string;
  readonly text: string;
  readonly secrets: readonly string[];
}

/** A PEM block of `label` with a body of random base64 lines. */
function pem(random: ReturnType<typeof createRandom>, label: string, lines: number): { block: string; body: string } {
  const body = Array.from({ length: lines }, () => random.from(ALPHABET.base64, 64)).join('\n');
  return { block: `-----BEGIN ${label}-----\n${body}\n-----END ${label}-----`, body };
}

/** An SSH public key blob (wire format, base64) of `type` with random key material of `bytes` bytes. */
function sshPublicKey(random: ReturnType<typeof createRandom>, type: string, bytes: number): string {
  const field = (data: Buffer) => Buffer.concat([Buffer.from([0, 0, 0, 0].map((_, index) => (data.length >>> (8 * (3 - index))) & 0xff)), data]);
  const material = Buffer.from(Array.from({ length: bytes }, () => Math.floor(random.next() * 256)));
  return Buffer.concat([field(Buffer.from(type)), field(material)]).toString('base64');
}

const base64 = (text: string) => Buffer.from(text).toString('base64');
const base64url = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');

/** At least 40 secret formats, each in the context it is usually found in. */
export function secretSamples(seed = 20240611): SecretSample[] {
  const random = createRandom(seed);
  const { from } = random;
  const sample = (name: string, secret: string, text: (secret: string) => string): SecretSample => ({ name, text: text(secret), secrets: [secret] });
  const rsa = pem(random, 'RSA PRIVATE KEY', 25);
  const ec = pem(random, 'EC PRIVATE KEY', 3);
  const openssh = pem(random, 'OPENSSH PRIVATE KEY', 6);
  const pkcs8 = pem(random, 'PRIVATE KEY', 16);
  const pgp = pem(random, 'PGP PRIVATE KEY BLOCK', 10);
  const gcp = pem(random, 'PRIVATE KEY', 16);
  const jwtSignature = from(ALPHABET.base64url, 43);
  const jwt = `${base64url({ alg: 'HS256', typ: 'JWT' })}.${base64url({ sub: '1234567890', name: 'Ada', iat: 1716239022 })}.${jwtSignature}`;
  const sendgrid = `SG.${from(ALPHABET.base64url, 22)}.${from(ALPHABET.base64url, 43)}`;
  const basic = base64(`deploy-bot:${from(ALPHABET.base62, 18)}`);
  const natsSeed = `SU${from(ALPHABET.base32, 56)}`;
  const urlPassword = [from(LOWER, 4), '@', from(LOWER, 4), '#', from(LOWER, 5)];
  return [
    sample('AWS access key id', `AKIA${from(ALPHABET.upperDigits, 16)}`, (key) => `aws_access_key_id = ${key}`),
    sample('AWS temporary access key id', `ASIA${from(ALPHABET.upperDigits, 16)}`, (key) => `export AWS_ACCESS_KEY_ID=${key}`),
    sample('AWS secret access key (credentials file)', from(ALPHABET.base64, 40), (key) => `[default]\naws_secret_access_key = ${key}\n`),
    sample('AWS secret access key (STS JSON)', from(ALPHABET.base64, 40), (key) => `{"Credentials": {"AccessKeyId": "x", "SecretAccessKey": "${key}"}}`),
    sample('GitHub classic token', `ghp_${from(ALPHABET.base62, 36)}`, (token) => `git clone https://x-access-token:${token}@github.com/acme/app.git`),
    sample('GitHub OAuth token', `gho_${from(ALPHABET.base62, 36)}`, (token) => `oauth token ${token}`),
    sample('GitHub user-to-server token', `ghu_${from(ALPHABET.base62, 36)}`, (token) => `token=${token}`),
    sample('GitHub server-to-server token', `ghs_${from(ALPHABET.base62, 36)}`, (token) => `GITHUB_TOKEN: ${token}`),
    sample('GitHub refresh token', `ghr_${from(ALPHABET.base62, 76)}`, (token) => `refresh ${token}`),
    sample('GitHub fine-grained token', `github_pat_${from(ALPHABET.base62, 22)}_${from(ALPHABET.base62, 59)}`, (token) => `using ${token} for the API`),
    sample('GitLab personal access token', `glpat-${from(ALPHABET.base62, 20)}`, (token) => `PRIVATE-TOKEN: ${token}`),
    sample('GitLab deploy token', `gldt-${from(ALPHABET.base62, 20)}`, (token) => `deploy with ${token}`),
    sample('Slack bot token', `xoxb-${from(DIGITS, 12)}-${from(DIGITS, 13)}-${from(ALPHABET.base62, 24)}`, (token) => `SLACK_BOT_TOKEN=${token}`),
    sample('Slack user token', `xoxp-${from(DIGITS, 12)}-${from(DIGITS, 12)}-${from(DIGITS, 13)}-${from(ALPHABET.hex, 32)}`, (token) => `slack: ${token}`),
    sample('Slack webhook URL', `https://hooks.slack.com/services/T${from(ALPHABET.upperDigits, 10)}/B${from(ALPHABET.upperDigits, 10)}/${from(ALPHABET.base62, 24)}`, (url) => `webhook: ${url}`),
    sample('Stripe live secret key', `sk_live_${from(ALPHABET.base62, 99)}`, (key) => `Stripe.api_key = "${key}"`),
    sample('Stripe test secret key', `sk_test_${from(ALPHABET.base62, 24)}`, (key) => `stripe ${key}`),
    sample('Stripe restricted key', `rk_live_${from(ALPHABET.base62, 24)}`, (key) => `restricted ${key}`),
    sample('Stripe webhook secret', `whsec_${from(ALPHABET.base62, 32)}`, (key) => `endpoint secret ${key}`),
    sample('npm access token', `npm_${from(ALPHABET.base62, 36)}`, (token) => `//registry.npmjs.org/:_authToken=${token}`),
    sample('npm legacy auth token', `${from(ALPHABET.hex, 8)}-${from(ALPHABET.hex, 4)}-${from(ALPHABET.hex, 4)}-${from(ALPHABET.hex, 4)}-${from(ALPHABET.hex, 12)}`, (token) => `//registry.npmjs.org/:_authToken=${token}`),
    sample('JSON Web Token', jwt, (token) => `Cookie: session=${token}`),
    { name: 'RSA private key (PEM)', text: `key file:\n${rsa.block}\n`, secrets: rsa.body.split('\n') },
    { name: 'EC private key (PEM)', text: ec.block, secrets: ec.body.split('\n') },
    { name: 'OpenSSH private key', text: `$ cat ~/.ssh/id_ed25519\n${openssh.block}\n`, secrets: openssh.body.split('\n') },
    { name: 'PKCS#8 private key', text: pkcs8.block, secrets: pkcs8.body.split('\n') },
    { name: 'PGP private key block', text: pgp.block, secrets: pgp.body.split('\n') },
    {
      name: 'GCP service account private key (JSON)',
      text: JSON.stringify({ type: 'service_account', project_id: 'acme-prod', private_key: `${gcp.block}\n`, client_email: 'bot@acme-prod.iam.gserviceaccount.com' }),
      secrets: gcp.body.split('\n'),
    },
    sample('PostgreSQL URL with password', from(ALPHABET.base62, 20), (password) => `DATABASE_URL=postgres://app:${password}@db.internal:5432/app`),
    sample('MySQL URL with password', `${from(ALPHABET.base62, 12)}!x`, (password) => `mysql://root:${password}@127.0.0.1:3306/shop`),
    sample('MongoDB SRV URL with password', from(ALPHABET.base62, 16), (password) => `mongodb+srv://admin:${password}@cluster0.ab1cd.mongodb.net/test`),
    sample('Redis URL with password only', from(ALPHABET.base62, 24), (password) => `REDIS_URL=redis://:${password}@cache:6379/0`),
    sample('AMQP URL with password', from(ALPHABET.base62, 14), (password) => `amqp://guest:${password}@rabbit:5672/`),
    sample('Azure storage account key', `${from(ALPHABET.base64, 86)}==`, (key) => `DefaultEndpointsProtocol=https;AccountName=acme;AccountKey=${key};EndpointSuffix=core.windows.net`),
    sample('OpenAI project key', `sk-proj-${from(ALPHABET.base64url, 58)}T3BlbkFJ${from(ALPHABET.base64url, 58)}`, (key) => `OPENAI_API_KEY=${key}`),
    sample('OpenAI legacy key', `sk-${from(ALPHABET.base62, 20)}T3BlbkFJ${from(ALPHABET.base62, 20)}`, (key) => `openai.api_key = '${key}'`),
    sample('Anthropic API key', `sk-ant-api03-${from(ALPHABET.base64url, 93)}AA`, (key) => `x-api-key: ${key}`),
    sample('Google API key', `AIza${from(ALPHABET.base64url, 35)}`, (key) => `https://maps.googleapis.com/maps/api/geocode/json?address=x&key=${key}`),
    sample('SendGrid API key', sendgrid, (key) => `sendgrid ${key}`),
    sample('Hugging Face token', `hf_${from(ALPHABET.base62, 34)}`, (token) => `huggingface-cli login --token ${token}`),
    sample('Groq API key', `gsk_${from(ALPHABET.base62, 52)}`, (key) => `GROQ=${key}`),
    sample('Shopify access token', `shpat_${from(ALPHABET.hex, 32)}`, (token) => `shopify ${token}`),
    sample('Linear API key', `lin_api_${from(ALPHABET.base62, 40)}`, (key) => `linear ${key}`),
    sample('Databricks token', `dapi${from(ALPHABET.hex, 32)}`, (token) => `databricks ${token}`),
    sample('Basic authorization header', basic, (credential) => `Authorization: Basic ${credential}`),
    sample('Bearer authorization header', `${from(ALPHABET.base62, 32)}.${from(ALPHABET.base62, 12)}`, (credential) => `curl -H "Authorization: Bearer ${credential}" https://api.example.com`),
    sample('Twilio auth token (.env)', from(ALPHABET.hex, 32), (token) => `TWILIO_AUTH_TOKEN=${token}`),
    sample('Datadog API key (YAML)', from(ALPHABET.hex, 32), (key) => `datadog:\n  api_key: "${key}"`),
    sample('Password in a .env file', `${from(ALPHABET.base62, 10)}#${from(DIGITS, 3)}`, (password) => `DB_PASSWORD=${password}`),
    sample('Client secret in JSON', from(ALPHABET.base64url, 40), (secret) => `{"client_id": "acme-web", "client_secret": "${secret}"}`),
    sample('Unlabelled random credential', from(ALPHABET.base62, 40), (value) => `session cookie: ${value}`),
    sample('NATS user nkey seed', `SU${from(ALPHABET.base32, 56)}`, (seed) => `# the bot's seed\nseed: ${seed}`),
    sample('NATS account nkey seed', `SA${from(ALPHABET.base32, 56)}`, (seed) => `nsc import account --seed ${seed}`),
    {
      name: 'NATS .creds file',
      text: `-----BEGIN NATS USER JWT-----\n${jwt}\n------END NATS USER JWT------\n\n************************* IMPORTANT *************************\nNKEY Seed printed below can be used to sign and prove identity.\n\n-----BEGIN USER NKEY SEED-----\n${natsSeed}\n------END USER NKEY SEED------\n`,
      secrets: [natsSeed, jwtSignature],
    },
    sample('Rails SECRET_KEY_BASE', from(ALPHABET.hex, 128), (key) => `SECRET_KEY_BASE=${key}`),
    sample('Django SECRET_KEY', `django-insecure-${from(`${ALPHABET.lowerDigits}!@#$%^&*(-_=+)`, 50)}`, (key) => `SECRET_KEY = '${key}'`),
    sample('secretKey in YAML, unquoted hex', from(ALPHABET.hex, 40), (key) => `minio:\n  secretKey: ${key}`),
    sample('secret_key in a Python settings file', from(ALPHABET.hex, 48), (key) => `secret_key = "${key}"`),
    sample('Letters-only password in YAML', from(LOWER, 12), (password) => `database:\n  user: app\n  password: ${password}`),
    sample('PGPASSWORD of letters', from(LOWER, 11), (password) => `PGPASSWORD=${password} psql -h db -U app`),
    sample('Letters-only client secret', from(LOWER, 30), (secret) => `client_secret=${secret}`),
    sample('ADO.NET connection string password', from(UPPER + LOWER, 14), (password) => `Server=tcp:acme.database.windows.net,1433;Database=app;User ID=app;Password=${password};Encrypt=True;`),
    sample('--password flag of letters', from(LOWER, 12), (password) => `mysql -u root --password=${password} shop`),
    sample('mysql -p with the password glued', `${from(ALPHABET.base62, 8)}!${from(DIGITS, 2)}`, (password) => `mysql -u root -p${password} shop`),
    sample('AWS STS session token of 1,100 characters (JSON)', `IQoJb3JpZ2luX2VjE${from(ALPHABET.base64, 1100)}`, (token) => `{"Credentials": {"SessionToken": "${token}", "Expiration": "2024-06-11T11:42:07Z"}}`),
    {
      name: 'URL password with a raw @ and #',
      text: `DATABASE_URL=postgres://admin:${urlPassword.join('')}@db:5432/x`,
      secrets: [urlPassword[0]!, urlPassword[2]!, urlPassword[4]!],
    },
    sample('GitHub token authorization scheme', from(ALPHABET.hex, 40), (token) => `curl -H "Authorization: token ${token}" https://api.github.com/user`),
    sample('Discord webhook URL', from(ALPHABET.base64url, 68), (secret) => `WEBHOOK=https://discord.com/api/webhooks/${from(DIGITS, 18)}/${secret}`),
    sample('Password reset link', from(ALPHABET.base62, 32), (secret) => `reset your password at https://app.example.com/account/reset/${secret}?utm_source=mail`),
    sample('Random credential in a path', from(ALPHABET.base62, 30), (secret) => `cat /run/secrets/${secret}`),
    sample('Base64 secret that starts with a slash', `/${from(ALPHABET.base64, 39)}`, (secret) => `{"SecretAccessKey": "${secret}"}`),
    sample('Base64url secret with hyphens', `${from(ALPHABET.base64url, 14)}-${from(ALPHABET.base64url, 14)}-${from(ALPHABET.base64url, 14)}`, (secret) => `refresh ${secret}`),
    // Both parts of a SendGrid key go (its 22-character id is too short for the high-entropy rule), a `-` in it too.
    ...[`${from(ALPHABET.base62, 9)}-${from(ALPHABET.base62, 12)}`, `${from(ALPHABET.base62, 11)}_${from(ALPHABET.base62, 10)}`].map((id, index) => {
      const secret = `${from(ALPHABET.base64url, 20)}-${from(ALPHABET.base64url, 22)}`;
      return { name: `SendGrid API key, both parts (${index + 1})`, text: `curl -X POST https://api.sendgrid.com/v3/mail/send -H "x-sg-key: SG.${id}.${secret}"`, secrets: [id, secret] };
    }),
    // Hex, which the high-entropy rule keeps as a digest would be.
    sample('DigitalOcean personal access token', `dop_v1_${from(ALPHABET.hex, 64)}`, (token) => `doctl auth init --access-token ${token}`),
    sample('DigitalOcean OAuth token', `doo_v1_${from(ALPHABET.hex, 64)}`, (token) => `{"access_tok": "${token}", "expires_in": 2592000}`),
    sample('DigitalOcean refresh token', `dor_v1_${from(ALPHABET.hex, 64)}`, (token) => `refresh with ${token}`),
  ];
}

/** At least 40 texts that look like secrets to a careless rule and must come through verbatim. */
export function lookAlikes(seed = 20240612): string[] {
  const random = createRandom(seed);
  const { from } = random;
  const uuid = () => `${from(ALPHABET.hex, 8)}-${from(ALPHABET.hex, 4)}-4${from(ALPHABET.hex, 3)}-a${from(ALPHABET.hex, 3)}-${from(ALPHABET.hex, 12)}`;
  const sha1 = from(ALPHABET.hex, 40);
  const sha256 = from(ALPHABET.hex, 64);
  return [
    `commit ${sha1}`,
    `Merge: ${sha1.slice(0, 7)} ${from(ALPHABET.hex, 7)}`,
    `${sha256}  agentbus-0.1.0.tgz`,
    `sha512: ${from(ALPHABET.hex, 128)}`,
    `image: ghcr.io/acme/agentbus@sha256:${sha256}`,
    `"integrity": "sha512-${from(ALPHABET.base64, 86)}=="`,
    `request ${uuid()} failed`,
    `CorrelationId: ${uuid().toUpperCase()}`,
    `ulid 01HZX${from('0123456789ABCDEFGHJKMNPQRSTVWXYZ', 21)}`,
    `sessionId=${from(ALPHABET.base62, 22)}`,
    `tool call call_${from(ALPHABET.base62, 22)} of turn ${from(ALPHABET.base62, 22)}`,
    `{"type":"tool_use","id":"toolu_01${from(ALPHABET.base62, 22)}","name":"read_file"}`,
    `x-request-id: req_011C${from(ALPHABET.base62, 20)}; chatcmpl-${from(ALPHABET.base62, 29)}`,
    'export function createOAuth2ClientForTenant42() {}',
    'class ListObjectsV2CommandOutput extends Base64EncodedSHA256Digest {}',
    'ERR_HTTP2_STREAM_CANCEL_AND_RETRY_LATER thrown by TestHTTP2ServerPushPromiseHandler',
    'const useQueryClientProviderV5Hook = parseISO8601DateTimeWithTz;',
    'user_account_settings_v2_migration_2024_01',
    'import { S3Client } from "@aws-sdk/client-s3-v3-2024";',
    '/home/runner/work/agentbus/agentbus/services/runtime/toolExecution2Helpers.ts:42:11',
    'C:\\Users\\BuildAgent\\AppData\\Local\\Temp\\vitest-8f3a2c\\ChromiumProfileV2',
    'src/scrub/high-entropy.ts and test/helpers/secret-corpus.ts',
    'https://api.github.com/repos/nats-io/nats.js/pulls?state=open&per_page=100&page=2',
    'http://127.0.0.1:4222/varz?subs=1',
    `https://console.aws.amazon.com/cloudwatch/home?region=eu-west-1#logsV2:log-groups/log-group/$252Faws$252Flambda$252FagentbusRuntimeV2`,
    'git@github.com:nats-io/nats.js.git',
    's3://acme-agentbus-logs/runtime/2024/06/11/part-00000.json.gz',
    'arn:aws:iam::123456789012:role/AgentbusRuntimeExecutionRoleV2',
    'ada.lovelace+agentbus@example.com',
    'fe80::1ff:fe23:4567:890a%eth0',
    'v1.2.3-beta.4+build.5678 released 2024-06-11T10:42:07.123Z',
    'golang.org/x/net v0.0.0-20240112183412-5f3a9c7e1b2d',
    `/nix/store/${from(ALPHABET.lowerDigits, 32)}-nodejs-20.19.0`,
    'agentbus-runtime-7d9f8b6c5-x2k4m   1/1   Running   0   3d2h',
    'com.example.agentbus.runtime.ToolExecution2Helper.executeBatch(ToolExecution2Helper.java:118)',
    'We support Bearer authentication and Basic authentication.',
    'The password is stored in the OS keychain; the token expires after an hour.',
    'const apiKey = process.env.OPENAI_API_KEY;',
    'token = getToken(); secret = config.secretValue',
    'max_tokens: 4096\ntokenizer: cl100k_base\ninput_tokens=100000',
    'password: ${DB_PASSWORD}',
    'apiKey: "<your-api-key>"',
    'Content-Type: application/json; charset=utf-8',
    'password = hashlib.sha256(pw).hexdigest()',
    'secret = base64.b64decode(raw)',
    'password = request.form.get("password")',
    'interface Login {\n  readonly token: string;\n  password: unknown;\n}',
    'const token = sessionToken ?? next_token; connect({ password: raw_pw_hash }, token: CancellationToken)',
    'volumes:\n  - name: tls\n    secret:\n      secretName: agentbus-tls',
    '{"usage":{"prompt_token": 123456, "completion_tokens": 77}}',
    'mysql -u root -p shop < dump.sql',
    'nkey: UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4',
    `<script src="/_next/static/chunks/pages/_app-${from(ALPHABET.base62, 20)}.js"></script>`,
    // A document's id in its URL is a capability of a link-shared document: scored like any token (not kept).
    'https://github.com/nats-io/nats.js/blob/main/jetstream/src/jsmconsumer_api.ts#L171',
    `import "/node_modules/.vite/deps/chunk-${from(ALPHABET.upperDigits, 8)}.js?v=${from(ALPHABET.hex, 8)}";`,
    `arn:aws:cloudformation:eu-west-1:123456789012:stack/AgentbusStack/${uuid()}`,
    `gs://acme-agentbus/exports/2024/06/11/session-${from(ALPHABET.base62, 24)}.jsonl`,
    `url(https://fonts.gstatic.com/s/inter/v13/${from(ALPHABET.base64url, 60)}.woff2)`,
    `"integrity": "sha1-${from(ALPHABET.base64, 27)}="`,
    `github.com/nats-io/nats.go v1.37.0 h1:${from(ALPHABET.base64, 43)}=\ngithub.com/nats-io/nats.go v1.37.0/go.mod h1:${from(ALPHABET.base64, 43)}=`,
    `ssh-ed25519 ${sshPublicKey(random, 'ssh-ed25519', 32)} ada@laptop`,
    `ssh-rsa ${sshPublicKey(random, 'ssh-rsa', 270)} deploy@ci`,
    `github.com,140.82.112.3 ecdsa-sha2-nistp256 ${sshPublicKey(random, 'ecdsa-sha2-nistp256', 80)}`,
    `cert-authority sk-ssh-ed25519@openssh.com ${sshPublicKey(random, 'sk-ssh-ed25519@openssh.com', 48)}`,
    `$ cat ca.pem\n${pem(random, 'CERTIFICATE', 20).block}\n`,
    pem(random, 'PUBLIC KEY', 6).block,
    `{"id": "pi_${from(ALPHABET.base62, 24)}", "latest_charge": "ch_${from(ALPHABET.base62, 24)}", "customer": "cus_${from(ALPHABET.base62, 24)}"}`,
    `stripe trigger: evt_${from(ALPHABET.base62, 24)}`,
    'agentbus-runtime-7d9f8b6c5-x2k4m-1234-Ab3dEf lease renewed',
    `.agentbus/sessions/${from(ALPHABET.base62, 22)}/snapshot.json and tenant/acme/session/${from(ALPHABET.base62, 22)}`,
    '{"maxSteps":8,"model":"openai:gpt-5.4-mini","temperature":0.2}',
    'SGVsbG8= is base64 for Hello',
    'color: #1f2937; background: linear-gradient(90deg, #fef3c7 0%, #fde68a 100%);',
    '| tool round trip p50 | 0.402 ms | raw request/reply 0.326 ms | 1.23× |',
    'import SG from "./scenegraph"; const node = new SG.Sprite(texture); SG.Button.primary',
    'doctl auth init --access-token dop_v1_<your-token>',
    'ALTER TABLE dop_v1_snapshots RENAME TO dop_v2_snapshots;',
    `droplet image ${sha1} built by doo_v1_migrate`,
  ];
}
