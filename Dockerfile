# syntax=docker/dockerfile:1
# Build on the current Node LTS; the runtime image carries only production dependencies and dist/.
FROM node:24-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# npm install installs the locked versions; see README (npm ci needs every platform's optional
# packages in the lock, which a single-platform registry mirror cannot provide).
RUN npm install --no-audit --no-fund
COPY tsconfig.json ./
COPY config ./config
COPY src ./src
COPY sim ./sim
COPY examples ./examples
COPY bench ./bench
COPY dashboard ./dashboard
RUN npm run build && npm prune --omit=dev

FROM node:24-slim AS runtime
ENV NODE_ENV=production PORT=8080
WORKDIR /app
COPY --from=build --chown=node:node /app/package.json ./
COPY --from=build --chown=node:node /app/node_modules ./node_modules
COPY --from=build --chown=node:node /app/dist ./dist
USER node
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD node -e "fetch('http://127.0.0.1:'+(process.env.PORT||8080)+'/healthz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"
CMD ["node", "dist/src/main.js"]
