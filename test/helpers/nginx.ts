/**
 * A real nginx (Debian's package) in front of castor nodes, configured as README.md's "Scaling
 * out" shows: an `upstream` block with `max_fails=1 fail_timeout=…` and keep-alive, uploads
 * streamed (`proxy_request_buffering off`), downloads streamed, `proxy_next_upstream error
 * timeout`. Plain HTTP on 127.0.0.1 (the README's TLS lines are left out: they change nothing
 * here). It runs in the foreground as a child of the test, with every file under a temp dir.
 *
 * nginx is installed with apt-get when missing (`ensureNginx`), as CI runs as root on a
 * possibly fresh Debian machine: a test needing it never skips.
 */
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { access, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { createConnection, createServer, type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";

const NGINX = "/usr/sbin/nginx";
const run = promisify(execFile);

let installing: Promise<void> | undefined;

/** Installs Debian's nginx package unless /usr/sbin/nginx exists (needs root, as CI runs). */
export function ensureNginx(): Promise<void> {
  installing ??= (async () => {
    if (await exists(NGINX)) return;
    if (process.getuid?.() !== 0) throw new Error(`${NGINX} is missing and installing it needs root: run 'apt-get install -y nginx' as root`);
    const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
    const install = () => run("apt-get", ["install", "-y", "--no-install-recommends", "nginx"], { env, maxBuffer: 64 * 1024 * 1024 });
    try {
      await install();
    } catch {
      // A fresh machine has no package lists yet.
      await run("apt-get", ["update"], { env, maxBuffer: 64 * 1024 * 1024 });
      await install();
    }
    if (!(await exists(NGINX))) throw new Error(`apt-get install nginx succeeded but ${NGINX} is still missing`);
  })();
  return installing;
}

export interface NginxOptions {
  /** Base URLs of the castor nodes (`http://127.0.0.1:port`). */
  upstreams: string[];
  /** The README's `fail_timeout`: how long a node that failed is out of rotation. Default 10 s. */
  failTimeoutSeconds?: number;
}

export interface NginxProcess {
  /** `http://127.0.0.1:port`. */
  url: string;
  /** The generated nginx.conf. */
  config: string;
  /** nginx's error log so far (upstream failures are logged there). */
  errorLog(): Promise<string>;
  stop(): Promise<void>;
}

export async function startNginx(options: NginxOptions): Promise<NginxProcess> {
  await ensureNginx();
  const prefix = await mkdtemp(join(tmpdir(), "castor-nginx-"));
  const port = await freePort();
  const failTimeout = options.failTimeoutSeconds ?? 10;
  const servers = options.upstreams.map((url) => `        server ${new URL(url).host} max_fails=1 fail_timeout=${failTimeout}s;`).join("\n");
  const config = `
# As root, workers would switch to nobody, who cannot enter the private temp dir.
${process.getuid?.() === 0 ? "user root root;" : ""}
daemon off;
master_process on;
worker_processes 1;
pid ${prefix}/nginx.pid;
error_log ${prefix}/error.log info;
events { worker_connections 1024; }
http {
    access_log ${prefix}/access.log;
    client_body_temp_path ${prefix}/client_body;
    proxy_temp_path ${prefix}/proxy;
    fastcgi_temp_path ${prefix}/fastcgi;
    uwsgi_temp_path ${prefix}/uwsgi;
    scgi_temp_path ${prefix}/scgi;

    # From here on: README.md, "Load balancer: nginx".
    upstream castor {
${servers}
        keepalive 64;
    }
    server {
        listen 127.0.0.1:${port};
        client_max_body_size 80m;
        proxy_request_buffering off;
        proxy_buffering off;
        proxy_read_timeout 300s;
        proxy_send_timeout 300s;
        location / {
            proxy_pass http://castor;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_next_upstream error timeout;
        }
    }
}
`;
  const configFile = join(prefix, "nginx.conf");
  await writeFile(configFile, config);
  const child = spawn(NGINX, ["-p", prefix, "-c", configFile, "-e", join(prefix, "error.log")], { stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  child.stderr!.setEncoding("utf8").on("data", (text: string) => (stderr += text));
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  try {
    await waitUntilListening(port, child, () => stderr);
  } catch (error) {
    child.kill("SIGKILL");
    await exited;
    await rm(prefix, { recursive: true, force: true });
    throw error;
  }
  let stopped: Promise<void> | undefined;
  return {
    url: `http://127.0.0.1:${port}`,
    config,
    errorLog: () => readFile(join(prefix, "error.log"), "utf8").catch(() => ""),
    stop() {
      stopped ??= (async () => {
        // SIGTERM: nginx's fast shutdown, master and workers.
        if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
        await exited;
        await rm(prefix, { recursive: true, force: true });
      })();
      return stopped;
    },
  };
}

async function exists(path: string): Promise<boolean> {
  return access(path).then(
    () => true,
    () => false,
  );
}

/** A port that was free a moment ago (nginx binds it itself). */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

async function waitUntilListening(port: number, child: ChildProcess, stderr: () => string): Promise<void> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`nginx exited with code ${child.exitCode} before listening:\n${stderr()}`);
    const open = await new Promise<boolean>((resolve) => {
      const socket = createConnection(port, "127.0.0.1");
      socket.once("connect", () => {
        socket.destroy();
        resolve(true);
      });
      socket.once("error", () => resolve(false));
    });
    if (open) return;
    if (Date.now() > deadline) throw new Error(`nginx did not listen on 127.0.0.1:${port} within 10 s:\n${stderr()}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
