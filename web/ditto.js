// ComfyUI-Ditto front-end extension.
// After a run, every Ditto node shows how long its stage took and at how many frames per second
// (the node's UI output "ditto_stats"); nodes that save an MP4 ("ditto_video") play it inline.
import { app } from "../../scripts/app.js";
import { api } from "../../scripts/api.js";

const STATS_KEY = "ditto_stats";
const VIDEO_KEY = "ditto_video";
const PREVIEW_WIDGET = "ditto_preview";

function formatStats(stats) {
  const seconds = stats.seconds < 10 ? stats.seconds.toFixed(2) : stats.seconds.toFixed(1);
  const parts = [`${seconds} s`];
  if (stats.frames !== undefined) parts.push(`${stats.frames} frames`);
  if (stats.fps) parts.push(`${stats.fps.toFixed(1)} fps`);
  return parts.join(" · ");
}

function viewUrl(file) {
  const query = new URLSearchParams({ filename: file.filename, subfolder: file.subfolder, type: file.type });
  // The same name is rewritten by a later run with a new counter, but cache-bust anyway.
  query.set("t", Date.now().toString());
  return api.apiURL(`/view?${query}`);
}

function showVideo(node, file) {
  let widget = node.widgets?.find((w) => w.name === PREVIEW_WIDGET);
  if (!widget) {
    const video = document.createElement("video");
    Object.assign(video, { controls: true, loop: true, muted: true, autoplay: true, playsInline: true });
    video.style.width = "100%";
    // Keep the node's aspect in step with the clip once its size is known.
    video.addEventListener("loadedmetadata", () => {
      widget.aspect = video.videoHeight / Math.max(1, video.videoWidth);
      node.setSize([node.size[0], node.computeSize([node.size[0], node.size[1]])[1]]);
      app.graph.setDirtyCanvas(true, true);
    });
    widget = node.addDOMWidget(PREVIEW_WIDGET, "video", video, { serialize: false, hideOnZoom: false });
    widget.aspect = 1;
    widget.computeSize = (width) => [width, (width - 20) * widget.aspect + 10];
  }
  widget.element.src = viewUrl(file);
}

app.registerExtension({
  name: "ComfyUI-Ditto.StageStats",
  async beforeRegisterNodeDef(nodeType, nodeData) {
    if (nodeData.category !== "Ditto") return;

    const onExecuted = nodeType.prototype.onExecuted;
    nodeType.prototype.onExecuted = function (output) {
      onExecuted?.apply(this, arguments);
      const stats = output?.[STATS_KEY]?.[0];
      this.dittoStats = stats ? formatStats(stats) : undefined;
      const video = output?.[VIDEO_KEY]?.[0];
      if (video) showVideo(this, video);
      this.setDirtyCanvas(true, true);
    };

    const onDrawForeground = nodeType.prototype.onDrawForeground;
    nodeType.prototype.onDrawForeground = function (ctx) {
      onDrawForeground?.apply(this, arguments);
      if (!this.dittoStats || this.flags?.collapsed) return;
      ctx.save();
      ctx.font = "11px sans-serif";
      ctx.fillStyle = "#8fd18f";
      ctx.textAlign = "right";
      // Just above the title bar's right end, out of the way of widgets and sockets.
      ctx.fillText(this.dittoStats, this.size[0] - 6, -LiteGraph.NODE_TITLE_HEIGHT - 4);
      ctx.restore();
    };
  },
});
