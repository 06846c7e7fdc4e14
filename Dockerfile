# One image for every agentbus service; docker-compose.yml picks the service with `command:`,
# e.g. `node --import tsx services/tools/main.ts`. The services run their TypeScript sources through
# tsx (a runtime dependency), so there is no build step. The CLI (cli/, bin/) is an application run from a
# checkout or the npm package, not a service: it stays out of the image.

FROM node:20-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
# Production dependencies only, at the versions package-lock.json names. `npm install` rather than
# `npm ci`: the lock lists only the platform packages (esbuild, rollup, msgpackr-extract) of the
# machine that wrote it, which `npm ci` refuses as out of sync. Install scripts stay off, as
# package.json's allowScripts says: esbuild's binary comes in its platform package, and msgpackr
# works without its native extra.
RUN npm install --omit=dev --ignore-scripts --no-audit --no-fund && npm cache clean --force

FROM node:20-bookworm-slim
# bubblewrap: the tools service runs each run_command in a bwrap sandbox (docs/tools.md, "run_command"). In a
# container bwrap needs user namespaces: see docker-compose.yml's tools service for what it is given.
RUN apt-get update \
  && apt-get install -y --no-install-recommends bubblewrap \
  && rm -rf /var/lib/apt/lists/*
ENV NODE_ENV=production
WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
COPY package.json tsconfig.json ./
COPY src ./src
COPY machines ./machines
COPY services ./services
COPY examples ./examples
# The tool workers' workspace; a named volume mounted here starts out owned by `node`.
RUN mkdir -p /workspace && chown node:node /workspace
ENV AGENTBUS_WORKSPACE=/workspace
# The sources stay owned by root and read-only to the service.
USER node
# The mains drain their NATS connection on SIGTERM (in-flight calls finish or are cancelled).
STOPSIGNAL SIGTERM
CMD ["node", "--import", "tsx", "services/runtime/main.ts"]
