// The web view's pages, scripts and style, compiled into the program from src/web/assets
// (cmake/embed_assets.cmake): no CDN, nothing downloaded, one binary to deploy.
#ifndef RAYACCEL_WEB_ASSETS_H_
#define RAYACCEL_WEB_ASSETS_H_

#include <string_view>

namespace rayaccel::web {

struct Asset {
  std::string_view name;  // "node.html", "rayaccel.css", ...
  std::string_view content_type;
  std::string_view body;
};

// The asset named `name`, or null.
const Asset* FindAsset(std::string_view name);

}  // namespace rayaccel::web

#endif  // RAYACCEL_WEB_ASSETS_H_
