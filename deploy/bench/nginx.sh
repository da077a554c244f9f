# Sourced by run.sh, instructions.sh and cpu-ab.sh: the nginx each sets beside
# v1compat, a plain reverse proxy to the sandbox V2, configured alike in all
# three so that their figures for it compare.
#
#   nginx_conf DIR LISTEN_PORT V2_HOST:PORT [MAIN_DIRECTIVE]
#
# writes DIR/nginx.conf (its pid, log and temporary paths in DIR too) for
#   nginx -p DIR -c DIR/nginx.conf -e DIR/error.log
nginx_conf() {
  local dir="$1" port="$2" upstream="$3" main="${4:-}"
  local user=""
  [ "$(id -u)" = 0 ] && user="user root;"
  mkdir -p "$dir"
  cat >"$dir/nginx.conf" <<EOF
$user
$main
daemon off;
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $dir/body;
  proxy_temp_path $dir/proxy;
  fastcgi_temp_path $dir/fastcgi;
  uwsgi_temp_path $dir/uwsgi;
  scgi_temp_path $dir/scgi;
  upstream v2 {
    server $upstream;
    keepalive 1024;         # as v1compat's upstream.pool_max_idle_per_host
  }
  server {
    listen 127.0.0.1:$port;
    keepalive_requests 1000000;
    keepalive_timeout 600s;
    location / {
      proxy_pass http://v2;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffer_size 16k;
      proxy_buffers 64 16k; # whole answers in memory, never a temp file
      proxy_max_temp_file_size 0;
    }
  }
}
EOF
}
